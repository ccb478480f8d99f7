"""A lean main.cpp for CUDA C++ candidates whose cpp_sources only declare their functions.

``load_inline`` compiles a ``main.cpp`` of ``#include <torch/extension.h>``, the candidate's
cpp_sources and the pybind11 bindings. Even with that header precompiled (``pch.py``) GCC
spends most of the step instantiating the templates the whole C++ frontend uses: 16 s of a
bindings file on the 2-core development machine, 11.8 s median beside 15 other builds on the
H200 (session 24). The bindings need far less: pybind11 with torch's type casters
(``torch/csrc/utils/pybind.h``, precompiled too) and ``torch::wrap_pybind_function``: 4.3 s
here.

Only sources that are nothing but declarations over the types listed below are bound this
way, so the lean header can never change what a candidate's functions do or accept (the
casters are the same torch/extension.h brings); anything else keeps torch/extension.h.
"""

from __future__ import annotations

import re

# main.cpp's first lines; the first include is the precompiled one (GCC takes a .gch only there)
HEADER = """#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>
namespace torch { using namespace at; }
"""

# Types (and qualifiers) a declaration may name: the casters torch/csrc/utils/pybind.h and
# pybind11/stl.h provide.
_TYPES = {
    "torch::Tensor", "at::Tensor", "void", "bool", "int", "long", "unsigned", "short",
    "float", "double", "int64_t", "int32_t", "uint64_t", "uint32_t", "size_t", "std::int64_t",
    "std::int32_t", "std::size_t", "std::vector", "std::tuple", "std::pair", "std::optional",
    "c10::optional", "std::string", "at::IntArrayRef", "torch::IntArrayRef", "c10::IntArrayRef",
    "at::ScalarType", "torch::ScalarType", "torch::Dtype", "const",
}
# Includes a declarations-only source may carry: the lean header stands in for them.
_INCLUDE = re.compile(r"^\s*#\s*include\s*<(?:torch/extension\.h|torch/types\.h|vector|tuple|"
                      r"optional|string|cstdint)>\s*$", re.M)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_NAME = re.compile(r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*")
_DECLARATION = re.compile(r"^([\w:<>,&*\s]+?)\b([A-Za-z_]\w*)\s*\(([\w:<>,&*\s]*)\)$")


def _split_top(text: str) -> list[str]:
    """Split a parameter list at the commas outside template brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (part.strip() for part in parts) if p]


def _types_known(text: str, named: bool) -> bool:
    """Whether a return type (``named`` False) or a parameter (its last name its own) names
    only known types."""
    names = [re.sub(r"\s+", "", n) for n in _NAME.findall(text)]
    if named and len(names) > 1 and re.search(r"\w\s*$", text):
        names = names[:-1]  # the parameter's name
    return bool(names) and all(n in _TYPES for n in names)


def declarations_only(cpp: str) -> str | None:
    """The cpp_sources without their standard includes if they only declare functions over
    known types; None otherwise (they then keep torch/extension.h)."""
    body = _INCLUDE.sub("", _COMMENT.sub(" ", cpp))
    statements = [s.strip() for s in body.split(";")]
    if statements[-1]:  # text after the last semicolon: not a declaration
        return None
    statements = statements[:-1]
    if not statements:
        return None
    for statement in statements:
        found = _DECLARATION.match(statement)
        if not found or "#" in statement:
            return None
        returns, _name, params = found.groups()
        if not _types_known(returns, named=False):
            return None
        if params.strip() not in ("", "void") and not all(
                _types_known(p, named=True) for p in _split_top(params)):
            return None
    return "\n".join(s + ";" for s in statements)
