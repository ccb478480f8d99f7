"""A kernel's parameter list, read from its CUDA source: what each argument must be.

A raw kernel is launched with a list of arguments that the driver copies byte for byte into
the kernel's parameters, so a tensor of the wrong dtype or an integer that overflows an
``int`` would silently compute garbage. The parameter list tells what each argument must be:
a pointer (a tensor of a matching dtype) or an arithmetic scalar (a Python number, packed to
the declared width). Templates are read through the name expression (``act<float, 4>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


class KernelSourceError(ValueError):
    """The kernel source or name cannot be used as a raw kernel (one clear message)."""


# Element types a pointer may point to, by the tensor dtype names they accept. Vector types
# (float4, half2, ...) accept their element dtype; the tensor must then be aligned to them.
POINTEE = {
    "float": ("float32",), "double": ("float64",), "__half": ("float16",), "half": ("float16",),
    "__nv_bfloat16": ("bfloat16",), "nv_bfloat16": ("bfloat16",),
    "signed char": ("int8",), "char": ("int8",), "int8_t": ("int8",),
    "unsigned char": ("uint8", "bool"), "uint8_t": ("uint8", "bool"), "bool": ("bool",),
    "short": ("int16",), "int16_t": ("int16",), "int": ("int32",), "int32_t": ("int32",),
    "unsigned int": ("uint32",), "unsigned": ("uint32",), "uint32_t": ("uint32",),
    "long long": ("int64",), "long": ("int64",), "int64_t": ("int64",),
    "unsigned long long": ("uint64",), "uint64_t": ("uint64",), "size_t": ("uint64",),
}
VECTORS = {"float2": ("float", 8), "float4": ("float", 16), "double2": ("double", 16),
           "int2": ("int", 8), "int4": ("int", 16), "half2": ("__half", 4),
           "__half2": ("__half", 4), "__nv_bfloat162": ("__nv_bfloat16", 4),
           "uint4": ("unsigned int", 16), "uint2": ("unsigned int", 8)}
# Scalars passed by value, by the numpy type that packs them to the declared width.
SCALARS = {
    "float": np.float32, "double": np.float64, "__half": np.float16, "half": np.float16,
    "bool": np.bool_, "signed char": np.int8, "char": np.int8, "int8_t": np.int8,
    "unsigned char": np.uint8, "uint8_t": np.uint8, "short": np.int16, "int16_t": np.int16,
    "unsigned short": np.uint16, "uint16_t": np.uint16, "int": np.int32, "int32_t": np.int32,
    "unsigned int": np.uint32, "unsigned": np.uint32, "uint32_t": np.uint32,
    "long long": np.int64, "long": np.int64, "int64_t": np.int64,
    "unsigned long long": np.uint64, "uint64_t": np.uint64, "size_t": np.uint64,
}
_QUALIFIERS = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict|struct|"
                         r"__grid_constant__|signed(?=\s+(?:int|long|short)))\b")
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_IDENT = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``pointer`` (a tensor's memory) or a scalar passed by value."""

    name: str
    ctype: str  # the element type for a pointer, the type for a scalar (templates resolved)
    pointer: bool
    align: int = 1  # a pointer to a vector type (float4): the tensor must be this aligned

    def describe(self) -> str:
        return f"{self.ctype}{'*' if self.pointer else ''} {self.name}"


def parse_params(source: str, name: str) -> list[Param]:
    """The parameters of ``__global__`` function ``name`` (a name expression for templates).

    Raises:
        KernelSourceError: no such kernel, or a parameter that cannot be passed (a struct, a
            pointer to a pointer, a template parameter the name does not give).
    """
    base, _, targs = name.partition("<")
    base = base.strip()
    if not _IDENT.fullmatch(base):
        raise KernelSourceError(f"kernel name {name!r} is not a C identifier (or a template "
                                "instance such as 'act<float>')")
    text = _COMMENTS.sub(" ", source)
    m = re.search(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__"
                  rf"\s*\([^)]*\)\s*)?{base}\s*\(", text)
    if m is None:
        found = re.findall(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
                           r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)", text)
        raise KernelSourceError(f"the source has no __global__ void {base}(...)" + (
            f" (its kernels: {', '.join(found)})" if found else " (it defines no __global__ kernel)"))
    types = _template_types(text[:m.start()], targs.rstrip().removesuffix(">") if targs else "",
                            base)
    params = []
    for raw in _split(_balanced(text, m.end() - 1)):
        params.append(_param(raw, types, base))
    return params


def _template_types(before: str, args: str, base: str) -> dict[str, str]:
    """``template <typename T, int N>`` before the kernel, bound to the name's arguments."""
    m = re.search(r"template\s*<([^<>]*)>\s*(?:extern\s+\"C\"\s*)?$", before.rstrip())
    if m is None:
        if args:
            raise KernelSourceError(f"{base} is not a template, but the name gives template "
                                    f"arguments <{args}>")
        return {}
    formals = [f.strip() for f in _split(m[1])]
    actuals = [a.strip() for a in _split(args)] if args else []
    if len(actuals) != len(formals):
        raise KernelSourceError(f"{base} is a template <{m[1].strip()}>: name it with its "
                                f"{len(formals)} argument(s), e.g. '{base}<float>'")
    bound = {}
    for formal, actual in zip(formals, actuals):
        words = formal.split()
        if words and words[0] in ("typename", "class"):
            bound[words[-1]] = actual
    return bound


def _balanced(text: str, open_at: int) -> str:
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1:i]
    raise KernelSourceError("the kernel's parameter list is not closed")


def _split(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, "<": 1, ")": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return [p for p in parts if p.strip() and p.strip() != "void"]


def _param(raw: str, types: dict[str, str], kernel: str) -> Param:
    text = " ".join(_QUALIFIERS.sub(" ", raw.split("=")[0]).split())
    stars = text.count("*") + text.count("&")
    words = text.replace("*", " ").replace("&", " ").split()
    if len(words) < 2:
        raise KernelSourceError(f"{kernel}: parameter '{raw.strip()}' has no name")
    pname, ctype = words[-1], " ".join(types.get(w, w) for w in words[:-1])
    ctype = " ".join(types.get(ctype, ctype).split())
    if "&" in text or stars > 1:
        raise KernelSourceError(f"{kernel}: parameter '{raw.strip()}': only pointers (one "
                                "level) and arithmetic scalars can be passed")
    if stars == 1:
        if ctype in VECTORS:
            elem, align = VECTORS[ctype]
            return Param(pname, elem, True, align)
        if ctype != "void" and ctype not in POINTEE:
            raise KernelSourceError(f"{kernel}: parameter '{raw.strip()}' points to {ctype}, "
                                    "which no tensor dtype matches")
        return Param(pname, ctype, True)
    if ctype not in SCALARS:
        raise KernelSourceError(f"{kernel}: parameter '{raw.strip()}' has type {ctype}: only "
                                "pointers and arithmetic scalars (int, long long, float, ...) "
                                "can be passed")
    return Param(pname, ctype, False)
