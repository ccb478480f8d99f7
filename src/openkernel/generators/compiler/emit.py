"""Writing one Triton kernel from graph values: index frames, loads, stores, shared sub-results.

Every value is computed *at a frame*: the index of each of its dimensions as Triton expressions
over the kernel's own program indices (``offs`` of a pointwise block, a reduction's ``row`` and
``col``, a matmul tile's ``rm`` and ``rn``). A view only changes the frame its input is computed
at (a reshape goes through the row-major position, a permute swaps indices, a broadcast drops
them), so chains of views and pointwise ops fuse into one expression of loads. Leaves are
contiguous, so a load's offset is the row-major position of its frame. A reduction or a matmul
result is only available at the kernel's own indices: met anywhere else, the emitter raises
:class:`Unfusable` and the planner stores that result in memory instead.

Masks follow the axes an expression varies along (a row-only load is masked by the row bound);
the text itself is kept by writer.py, the index rules of views are in views.py.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from dataclasses import dataclass

from openkernel.generators.compiler.graph import MATMUL_OPS, VIEW_OPS, Node, ScalarCode, Value
from openkernel.generators.compiler.sizes import ONE, Size, non_one, numel, row_major
from openkernel.generators.compiler.writer import TOKEN, KernelWriter

FLOATS = {"float32": "f32", "float16": "f32", "bfloat16": "f32", "float64": "f64"}
TL_TYPES = {"f32": "tl.float32", "f64": "tl.float64", "i64": "tl.int64", "i32": "tl.int32",
            "i1": "tl.int1", "i8": "tl.int8", "u8": "tl.uint8", "i16": "tl.int16"}


def ctype(dtype: str) -> str:
    """The type a kernel computes a value of this dtype in (halves widen to float32)."""
    return FLOATS.get(dtype) or {"int64": "i64", "int32": "i32", "bool": "i1", "int8": "i8",
                                 "uint8": "u8", "int16": "i16"}.get(dtype, "?")


class Unfusable(Exception):
    """``node`` cannot be computed inside this kernel; its outputs must be stored first."""

    def __init__(self, node: Node, why: str = "") -> None:
        super().__init__(why or f"{node.op} cannot be fused here")
        self.node = node


@dataclass(frozen=True)
class Frame:
    """Where a value is computed: its shape and per-dim indices, or its row-major position."""

    shape: tuple[Size, ...]
    idx: tuple[str, ...] | None = None
    flat: str | None = None



@dataclass(frozen=True)
class Code:
    """A computed value: an expression (usually a variable) and the type it is computed in."""

    expr: str
    ctype: str


def literal(value, ct: str = "f32") -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if value != value:
            return 'float("nan")'
        if value in (float("inf"), float("-inf")):
            return 'float("inf")' if value > 0 else '-float("inf")'
        text = repr(value)
    elif isinstance(value, int):
        text = f"{value}.0" if ct in ("f32", "f64") else str(value)
    elif isinstance(value, Size):
        text = value.atom()
    elif isinstance(value, ScalarCode):
        text = value.code
    else:
        raise TypeError(f"not a scalar: {value!r}")
    return f"({text})" if text.startswith("-") else text


class Emitter:
    """Computes graph values at frames into a :class:`KernelWriter`.

    ``stored`` are the values this kernel loads from memory (leaves and buffers earlier
    kernels wrote); ``anchor`` computes a reduction or matmul result where the kernel allows
    (or raises :class:`Unfusable`).
    """

    def __init__(self, writer: KernelWriter, stored: set[str], anchor, scalars: dict) -> None:
        self.w = writer
        self.stored = stored
        self.anchor = anchor
        self.scalars = scalars  # value id -> Python scalar (one-element constants)
        self.recompute = lambda v: False  # stored values this kernel computes anyway
        self.derived: dict[str, str] = {}  # derived size symbols (SizeTable.derived)
        self._rebound: Node | None = None
        self._reaches: dict = {}

    @contextmanager
    def rebound(self, node: Node):
        """Values that depend on ``node`` are recomputed (it is bound to other values)."""
        saved, self._rebound = self._rebound, node
        try:
            with self.w.scope():
                yield
        finally:
            self._rebound = saved

    def same_place(self, a: tuple[str, ...], b: tuple[str, ...], free: dict[str, Size]) -> bool:
        """Whether two index tuples name the same element wherever the kernel runs.

        Index expressions over the program indices (``free``, each below its size) are written
        differently but equal after a reshape and back (``(row * 8 + col) // 64`` is ``row //
        8`` when a row holds 64 of 512 columns): evaluated at random sizes and indices, they
        agree everywhere or (almost surely) somewhere not.
        """
        if a == b:
            return True
        if len(a) != len(b):
            return False
        rng = random.Random(0)
        for _ in range(24):
            env: dict[str, int] = {}
            for sym in self.w.symbols | {x for s in free.values() for x in s.syms}:
                env[sym] = rng.randint(1, 12)
            for name, text in self.derived.items():
                env[name] = max(1, _evaluate(text, env, {}))
            for name, size in free.items():
                env[name] = rng.randrange(max(1, _evaluate(size.code(), env, {})))
            try:
                if [_evaluate(x, env, self.w.exprs) for x in a] != \
                        [_evaluate(x, env, self.w.exprs) for x in b]:
                    return False
            except (KeyError, NameError, SyntaxError, TypeError, ZeroDivisionError):
                return False  # a loaded index or something else not plain arithmetic
        return True

    def reaches(self, v: Value, node: Node) -> bool:
        """``v`` is computed from ``node``'s outputs (inside this kernel)."""
        key = (v.id, id(node))
        if key not in self._reaches:
            self._reaches[key] = False
            if v.node is node:
                self._reaches[key] = True
            elif v.node is not None and (v.id not in self.stored or self.recompute(v)):
                self._reaches[key] = any(self.reaches(a, node) for a in v.node.tensors())
        return self._reaches[key]

    # -- frames ---------------------------------------------------------------------------
    def dims(self, f: Frame) -> tuple[str, ...]:
        if f.idx is not None:
            return f.idx
        target = non_one(f.shape)
        idx = self.w.block.lookup(("origin", f.flat, target))
        if idx is None:
            idx, strides = [], row_major(target)
            flat = f.flat if TOKEN.fullmatch(f.flat) else f"({f.flat})"
            for j, (size, stride) in enumerate(zip(target, strides)):
                e = flat if stride == ONE else f"{flat} // {self.w.size(stride)}"
                if j > 0:
                    e = f"({e}) % {self.w.size(size)}" if "//" in e else f"{e} % {self.w.size(size)}"
                idx.append(self.w.index(e))
            idx = tuple(idx)
            self.w.block.cache[("origin", f.flat, target)] = idx
            self.w.block.cache[("flat of", self._composed(Frame(target, idx)))] = f.flat
        it = iter(idx)
        return tuple("0" if s == ONE else next(it) for s in f.shape)

    @staticmethod
    def _composed(f: Frame) -> str:
        terms = []
        for size, stride, i in zip(f.shape, row_major(f.shape), f.idx):
            if size == ONE or i == "0":
                continue
            terms.append(i if stride == ONE else f"{i} * {stride.atom()}")
        return " + ".join(terms) or "0"

    def position(self, f: Frame) -> str:
        """A key naming the frame's row-major position, whichever form the frame is in."""
        if f.flat is not None:
            return f.flat
        text = self._composed(f)
        return self.w.block.lookup(("flat of", text)) or text

    def flat(self, f: Frame) -> str:
        if f.flat is not None:
            return f.flat
        text = self._composed(f)
        expr = self.w.block.lookup(("flat of", text))
        if expr is None:
            expr = self.w.index(text)
            self.w.block.cache[("flat of", text)] = expr
        key = ("origin", expr, non_one(f.shape))
        if self.w.block.lookup(key) is None:
            self.w.block.cache[key] = tuple(i for s, i in zip(f.shape, f.idx) if s != ONE)
        return expr

    def reshape(self, f: Frame, shape) -> Frame:
        shape = tuple(shape)
        if non_one(f.shape) == non_one(shape):
            if f.idx is None:
                return Frame(shape, flat=f.flat)
            it = iter(i for s, i in zip(f.shape, f.idx) if s != ONE)
            return Frame(shape, tuple("0" if s == ONE else next(it) for s in shape))
        return Frame(shape, flat=self.flat(f))

    def broadcast(self, f: Frame, shape) -> Frame:
        shape = tuple(shape)
        if shape == f.shape:
            return f
        if numel(shape) == ONE:
            return Frame(shape, tuple("0" for _ in shape))
        d = self.dims(f)
        off = len(f.shape) - len(shape)
        return Frame(shape, tuple("0" if s == ONE else d[j + off] for j, s in enumerate(shape)))

    # -- values ---------------------------------------------------------------------------
    def value(self, v: Value, f: Frame) -> Code:
        key = (v.id, self.position(f))
        local = self._rebound is not None and self.reaches(v, self._rebound)
        hit = self.w.block.lookup(key, local)
        if hit is not None:
            return hit
        if v.id in self.scalars:
            code = Code(literal(self.scalars[v.id], ctype(v.dtype)), ctype(v.dtype))
        elif v.id in self.stored and not v.leaf and self.recompute(v):
            try:  # a reduction of this kernel's own rows: cheaper computed than read
                code = self.anchor(self, v.node, v, f)
            except Unfusable:
                code = self.load(v, f)
        elif v.leaf or v.id in self.stored:
            code = self.load(v, f)
        else:
            node = v.node
            if node.op in VIEW_OPS:
                from openkernel.generators.compiler.views import source_frame  # (views uses us)

                src = node.args[0]
                code = self.value(src, source_frame(self, node, v, f))
            elif node.op == "reduce" or node.op in MATMUL_OPS:
                code = self.anchor(self, node, v, f)
            else:
                from openkernel.generators.compiler.kernels.pointwise import emit_op

                code = emit_op(self, node, v, f)
        self.w.block.cache[key] = code
        self.w.block.cache[(v.id, self.position(f))] = code  # the frame may have a flat name now
        return code

    def operand(self, a: Value, out_frame: Frame) -> Code:
        """A tensor operand of a pointwise op, broadcast to the op's frame."""
        return self.value(a, self.broadcast(out_frame, a.shape))

    def load(self, v: Value, f: Frame) -> Code:
        ptr = self.w.pointer(v)
        offset = self.flat(Frame(v.shape, f.idx, f.flat))
        mask = self.w.mask(self.w.axes_of(offset))
        ct = ctype(v.dtype)
        if offset == "0":
            expr = f"tl.load({ptr})"
        else:
            other = "0.0" if ct in ("f32", "f64") else "0"
            expr = f"tl.load({ptr} + {offset}" + (f", mask={mask}, other={other})" if mask else ")")
        if v.dtype in ("float16", "bfloat16"):
            expr += ".to(tl.float32)"
        return Code(self.w.assign(self.w.names.get(v.id, "t") + "_", expr, shared=True), ct)

    def store(self, v: Value, f: Frame, code: Code) -> None:
        ptr = self.w.pointer(v, write=True)
        offset = self.flat(Frame(v.shape, f.idx, f.flat))
        value = code.expr
        axes = self.w.axes_of(offset) | self.w.axes_of(value)
        for axis in sorted(self.w.axes_of(value) - self.w.axes_of(offset)):
            # A size-1 dim the block still spans (a matmul with N = 1): its lanes share the
            # address, the mask keeps the first, and the pointer gets the block's shape.
            offset = f"{offset} + 0 * {self.w.axis_vars[axis]}"
        if not self.w.axes_of(value) and axes:  # a constant: give it the block's shape
            value = f"tl.full({self.w.tiles[axes]}, {value}, {TL_TYPES.get(code.ctype, 'tl.float32')})"
        mask = self.w.mask(axes)
        self.w.line(f"tl.store({ptr} + {offset}, {value}.to({ptr}.dtype.element_ty)"
                    + (f", mask={mask})" if mask else ")"))


def _evaluate(expr: str, env: dict[str, int], exprs: dict[str, str]) -> int:
    """An index expression's value, its variables looked up (and evaluated) on the way."""
    names = {}
    for token in set(TOKEN.findall(expr)):
        if token in env:
            names[token] = env[token]
        elif token in exprs:
            env[token] = names[token] = _evaluate(exprs[token], env, exprs)
        else:
            raise NameError(token)
    return int(eval(expr, {"__builtins__": {}}, names))  # noqa: S307 - our own arithmetic


