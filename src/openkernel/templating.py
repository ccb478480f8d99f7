"""Templated kernels: one candidate that declares parameter options, judged at every combination.

The form (the same for Triton and CUDA C++, see README "Templated kernels"): a module-level
literal ``TEMPLATE_PARAMS = {"NAME": [option, ...], ...}`` and, for each NAME, a module-level
assignment ``NAME = default`` that the rest of the code uses: Triton code passes them as
``tl.constexpr`` block sizes, ``num_warps=`` or ``num_stages=``; CUDA C++ code formats them into
its source (``#define``, template arguments, block and grid shapes) before ``load_inline``.

Everything here reads source text with ``ast`` and rewrites assignment lines: the engine never
runs candidate code to instantiate a template.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import random
from dataclasses import dataclass, field

from openkernel import syntax

MARKER = "TEMPLATE_PARAMS"
_LITERALS = (int, float, str, bool)


class TemplateError(ValueError):
    """A template that cannot be instantiated (the message says what is wrong)."""


@dataclass
class Space:
    """The parameter options a template declares, in declaration order."""

    options: dict[str, list] = field(default_factory=dict)
    defaults: dict[str, object] = field(default_factory=dict)

    @property
    def size(self) -> int:
        n = 1
        for values in self.options.values():
            n *= len(values)
        return n


@dataclass
class Variant:
    """One combination of a template, as concrete code (a plain candidate)."""

    params: dict
    code: str


def _top_assignments(tree: ast.Module) -> dict[str, ast.Assign]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            found[node.targets[0].id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            found[node.target.id] = node
    return found


def parse(code: str) -> Space | None:
    """The template's space, None when the code is no template (no TEMPLATE_PARAMS).

    Raises TemplateError for a template that cannot work: options that are not a literal
    dict of non-empty lists of literals, a parameter with no module-level assignment for the
    code to read, a default that is not a literal.
    """
    try:
        tree = syntax.parse(code)
    except SyntaxError:
        return None  # the build reports it, with its line
    assigns = _top_assignments(tree)
    node = assigns.get(MARKER)
    if node is None:
        return None
    try:
        options = ast.literal_eval(node.value)
    except ValueError:
        raise TemplateError(f"{MARKER} (line {node.lineno}) must be a literal dict such as "
                            '{"BLOCK": [256, 512], "num_warps": [4, 8]}') from None
    if not isinstance(options, dict) or not options:
        raise TemplateError(f"{MARKER} (line {node.lineno}) must be a non-empty dict of "
                            "parameter name -> list of options")
    space = Space()
    for name, values in options.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise TemplateError(f"{MARKER}: {name!r} is not a parameter name")
        if not isinstance(values, (list, tuple)) or not values:
            raise TemplateError(f"{MARKER}: {name} has an empty option list")
        if not all(isinstance(v, _LITERALS) for v in values):
            raise TemplateError(f"{MARKER}: the options of {name} must be numbers, strings or "
                                "booleans")
        if len(set(map(repr, values))) != len(values):
            raise TemplateError(f"{MARKER}: {name} lists an option twice")
        target = assigns.get(name)
        if target is None:
            raise TemplateError(f"{MARKER}: unknown parameter {name}: the module has no "
                                f"top-level `{name} = ...` for the code to use")
        try:
            default = ast.literal_eval(target.value)
        except ValueError:
            raise TemplateError(f"{name} (line {target.lineno}) must be assigned a literal "
                                "default") from None
        space.options[name] = list(values)
        space.defaults[name] = default
    return space


def is_template(code: str) -> bool:
    """Whether the code declares TEMPLATE_PARAMS (a bad template counts: it is told why)."""
    try:
        return parse(code) is not None
    except TemplateError:
        return True


def instantiate(code: str, params: dict) -> str:
    """The concrete code of one combination: each parameter's assignment line rewritten, the
    options dict replaced by a comment naming the combination."""
    tree = syntax.parse(code)
    assigns = _top_assignments(tree)
    lines = code.splitlines(keepends=True)
    edits = []  # (first line, last line, replacement), applied bottom-up
    for name, value in params.items():
        node = assigns[name]
        edits.append((node.lineno, node.end_lineno, f"{name} = {value!r}\n"))
    marker = assigns[MARKER]
    chosen = ", ".join(f"{k}={v!r}" for k, v in params.items())
    edits.append((marker.lineno, marker.end_lineno,
                  f"# instantiated from a template ({MARKER}): {chosen}\n"))
    for first, last, text in sorted(edits, reverse=True):
        indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        lines[first - 1:last] = [indent + text]
    return "".join(lines)


def combinations(space: Space, bound: int, seed: str = "") -> tuple[list[dict], bool]:
    """Every combination, or past ``bound`` a sample of ``bound`` of them (and True).

    The sample always holds the defaults, then combinations drawn uniformly without
    replacement with a generator seeded by ``seed`` (the candidate's code), so the same
    template is always judged on the same sample.
    """
    names = list(space.options)
    every = [dict(zip(names, values)) for values in itertools.product(*space.options.values())]
    if len(every) <= bound:
        return every, False
    rng = random.Random(int(hashlib.sha256(seed.encode()).hexdigest()[:16], 16))
    default = {n: space.defaults[n] for n in names}
    picked = [default] if default in every else []
    rest = [c for c in every if c != default]
    picked += rng.sample(rest, bound - len(picked))
    return picked, True


def variants(code: str, bound: int) -> tuple[Space, list[Variant], bool]:
    """Parse, pick the combinations and instantiate them (raises TemplateError)."""
    space = parse(code)
    if space is None:
        raise TemplateError(f"not a template: no {MARKER}")
    chosen, sampled = combinations(space, bound, seed=code)
    return space, [Variant(params, instantiate(code, params)) for params in chosen], sampled


def label(params: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())
