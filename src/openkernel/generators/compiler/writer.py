"""The text of one @triton.jit function while it is written: scopes, names, parameters, masks.

A kernel body is a tree of scopes (the body, loop bodies): what a scope computed is shared by
what comes after it inside it (common sub-results are written once) and forgotten outside it.
Every variable knows the program axes it varies along (a matmul tile's rows ``m`` and columns
``n``, a reduction's rows ``r`` and columns ``c``), from which loads and stores get their masks.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from openkernel.generators.compiler.graph import Value
from openkernel.generators.compiler.sizes import SYMBOL, Size

TOKEN = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
# A call's keyword (``mask=`` of a load): a name, but no variable's (``==`` is a comparison).
KEYWORD = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\s*=(?!=)")


@dataclass
class Block:
    """Lines of one scope (the kernel body or a loop body) and what they computed."""

    indent: int
    parent: "Block | None" = None
    lines: list = field(default_factory=list)  # str or Block
    cache: dict = field(default_factory=dict)

    def lookup(self, key, local: bool = False):
        block = self
        while block is not None:
            if key in block.cache:
                return block.cache[key]
            block = None if local else block.parent
        return None

    def render(self) -> list[str]:
        out = []
        for line in self.lines:
            out.extend(line.render() if isinstance(line, Block) else
                       ["    " * self.indent + line] if line else [""])
        return out


class KernelWriter:
    """Lines, names, pointer and size parameters of one @triton.jit function."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names  # value id -> readable name of a pointer the kernel takes
        self.root = Block(indent=1)
        self.block = self.root
        self.reads: list[Value] = []
        self.writes: list[Value] = []
        self.symbols: set[str] = set()
        self.axes: dict[str, frozenset] = {}  # variable -> program axes it varies along
        self.masks: dict[frozenset, str] = {}  # axes -> mask variable
        self.tiles: dict[frozenset, str] = {}  # axes -> the shape of a block varying along them
        self.exprs: dict[str, str] = {}  # variable -> its expression (to evaluate indices)
        self.axis_vars: dict[str, str] = {}  # axis -> a variable spanning it ("n" -> "rn")
        self._count: dict[str, int] = {}

    # -- names and lines ------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        n = self._count.get(prefix, 0)
        self._count[prefix] = n + 1
        return f"{prefix}{n}"

    def line(self, text: str = "") -> None:
        self.block.lines.append(text)

    def axes_of(self, expr: str) -> frozenset:
        out: frozenset = frozenset()
        for token in TOKEN.findall(KEYWORD.sub("", expr)):
            out |= self.axes.get(token, frozenset())
            if SYMBOL.fullmatch(token):
                self.symbols.add(token)
        return out

    def assign(self, prefix: str, expr: str, comment: str = "", axes: frozenset | None = None,
               shared: bool = False) -> str:
        """``prefix<k> = expr``; ``axes`` overrides what it varies along (after a reduction);
        ``shared``: a pure expression already computed in scope is reused, not recomputed."""
        if shared:
            hit = self.block.lookup(("expr", expr))
            if hit is not None:
                return hit
        name = self.fresh(prefix)
        if shared:
            self.block.cache[("expr", expr)] = name
        found = self.axes_of(expr)
        self.axes[name] = found if axes is None else axes
        self.exprs[name] = expr
        self.line(f"{name} = {expr}" + (f"  # {comment}" if comment else ""))
        return name

    def define(self, name: str, expr: str, axes: frozenset, comment: str = "") -> str:
        """A named variable with the axes it varies along (program indices)."""
        self.axes[name] = axes
        self.axes_of(expr)
        self.line(f"{name} = {expr}" + (f"  # {comment}" if comment else ""))
        return name

    def index(self, expr: str) -> str:
        """A shared variable for an index expression (atoms are used as they are)."""
        if TOKEN.fullmatch(expr) or expr.isdigit():
            self.axes_of(expr)
            return expr
        key = ("index", expr)
        hit = self.block.lookup(key)
        if hit is None:
            hit = self.assign("i", expr)
            self.block.cache[key] = hit
        return hit

    def size(self, s: Size) -> str:
        for sym in s.syms:
            self.symbols.add(sym)
        return s.atom()

    def mask(self, axes: frozenset) -> str | None:
        if not axes:
            return None
        if axes in self.masks:
            return self.masks[axes]
        parts = [self.masks[frozenset([a])] for a in sorted(axes)]
        return " & ".join(parts)

    def pointer(self, v: Value, write: bool = False) -> str:
        group = self.writes if write else self.reads
        if v not in group:
            group.append(v)
        return f"{self.names[v.id]}_ptr"

    @contextmanager
    def loop(self, header: str):
        """A ``for`` block: what it computes stays inside it."""
        self.line(header)
        child = Block(indent=self.block.indent + 1, parent=self.block)
        self.block.lines.append(child)
        saved, self.block = self.block, child
        try:
            yield child
        finally:
            self.block = saved

    @contextmanager
    def scope(self):
        """A cache of its own over the same lines: what is computed in it is forgotten after."""
        child = Block(indent=self.block.indent, parent=self.block)
        saved, self.block = self.block, child
        try:
            yield
        finally:
            self.block = saved
            saved.lines.extend(child.lines)


