"""Pointwise aten ops as Triton expressions, and the fused pointwise kernel.

Each op computes at the frame of its output; tensor operands are broadcast to it (so inputs,
parameters, scalars and any broadcast pattern mix freely) and converted to the type the op
computes in (float32 for halves, as Inductor does). Index ops (gather, index_select,
embedding) and index-dependent ones (tril, triu, arange) read the frame's indices. The fused
pointwise kernel writes any chain of these over one flat range of elements.
"""

from __future__ import annotations

import re
from typing import Callable

from openkernel.generators.activations import BY_NAME
from openkernel.generators.compiler.emit import (
    TL_TYPES,
    Code,
    Emitter,
    Frame,
    Unfusable,
    ctype,
    literal,
)
from openkernel.generators.compiler.graph import DType, Node, ScalarCode, Value
from openkernel.generators.compiler.kernels.pooling import POOL_OPS, pool
from openkernel.generators.compiler.sizes import ONE, Size
from openkernel.generators.compiler.writer import KernelWriter

_FLOAT = ("f32", "f64")


class OpCtx:
    """What one op's expression is written from: its operands at the op's frame."""

    def __init__(self, em: Emitter, node: Node, out: Value, frame: Frame) -> None:
        self.em, self.node, self.out, self.frame = em, node, out, frame
        self.ct = ctype(out.dtype)

    def arg(self, pos: int, key: str | None = None, default=None):
        if key is not None and key in self.node.kwargs:
            return self.node.kwargs[key]
        return self.node.args[pos] if len(self.node.args) > pos else default

    def code(self, value, ct: str | None = None) -> str:
        """A tensor operand or scalar, converted to ``ct`` (default: the op's own type)."""
        ct = ct or self.ct
        if isinstance(value, Value):
            c = self.em.operand(value, self.frame)
            if c.ctype != ct and ct != "?":
                return f"{_paren(c.expr)}.to({TL_TYPES[ct]})"
            return c.expr
        if isinstance(value, (bool, int, float, Size, ScalarCode)):
            return literal(value, ct)
        raise Unfusable(self.node, f"argument {value!r} of {self.node.aten}")

    def t(self, pos: int, key: str | None = None, default=None, ct: str | None = None) -> str:
        return self.code(self.arg(pos, key, default), ct)

    def kind(self, value) -> str:
        """The type an operand computes in."""
        if isinstance(value, Value):
            return ctype(value.dtype)
        if isinstance(value, bool):
            return "i1"
        return "i64" if isinstance(value, (int, Size)) else "f32"

    def common(self, *values) -> str:
        kinds = [self.kind(v) for v in values]
        if "f64" in kinds:
            return "f64"
        if "f32" in kinds:
            return "f32"
        return "i64" if any(k not in ("i1",) for k in kinds) else "i1"

    def dims(self) -> tuple[str, ...]:
        return self.em.dims(self.frame)


def _paren(expr: str) -> str:
    """``expr`` safe as an operand: names, calls, numbers and bracketed text stay as they are."""
    if re.fullmatch(r"[\w.]+", expr) or _is_number(expr) or _closed(expr):
        return expr
    if re.fullmatch(r"[\w.]+\(.*\)", expr) and _closed(expr[expr.index("("):]):
        return expr
    return f"({expr})"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return not text.startswith("-")


def _closed(text: str) -> bool:
    """``(...)`` whose first bracket closes at the end."""
    if not text.startswith("("):
        return False
    depth = 0
    for k, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return k == len(text) - 1
    return False


def _act(name: str, x: str, **params) -> str:
    """An expression of activations.py (shared with the elementwise family) on ``x``."""
    expr = BY_NAME[name].triton
    for key, value in {"x": x, **params}.items():
        expr = re.sub(rf"\b{key}\b", value, expr)
    return expr


# --- the op table: aten base name -> expression ---------------------------------------------
def _binary(sym: str):
    def fn(c: OpCtx) -> str:
        return f"{_paren(c.t(0))} {sym} {_paren(c.t(1))}"
    return fn


def _add(sign: str, swap: bool = False):
    def fn(c: OpCtx) -> str:
        a, b = (c.t(1), c.t(0)) if swap else (c.t(0), c.t(1))
        alpha = c.arg(2, "alpha", 1)
        b = _paren(b) if alpha == 1 else f"{_paren(b)} * {literal(alpha, c.ct)}"
        return f"{_paren(a)} {sign} {b}"
    return fn


def _compare(sym: str):
    def fn(c: OpCtx) -> str:
        ct = c.common(c.arg(0), c.arg(1))
        return f"{_paren(c.t(0, ct=ct))} {sym} {_paren(c.t(1, ct=ct))}"
    return fn


def _unary(template: str):
    def fn(c: OpCtx) -> str:
        return template.format(x=c.t(0))
    return fn


def _trunc(x: str) -> str:
    return f"tl.where({x} < 0, tl.ceil({x}), tl.floor({x}))"


def _div(c: OpCtx) -> str:
    mode = c.arg(2, "rounding_mode")
    if mode is None:
        return f"{_paren(c.t(0, ct='f32' if c.ct not in _FLOAT else None))} / " \
               f"{_paren(c.t(1, ct='f32' if c.ct not in _FLOAT else None))}"
    q = f"{_paren(c.t(0, ct='f32'))} / {_paren(c.t(1, ct='f32'))}"
    q = f"tl.floor({q})" if mode == "floor" else _trunc(f"({q})")
    return q if c.ct in _FLOAT else f"({q}).to({TL_TYPES[c.ct]})"


def _pow(c: OpCtx) -> str:
    base, exponent = c.arg(0), c.arg(1)
    if isinstance(base, Value) and isinstance(exponent, (int, float)) and not isinstance(
            exponent, bool):
        x = _paren(c.t(0))
        e = float(exponent)
        if e == int(e) and abs(e) <= 4:
            if e == 0:
                return "1.0" if c.ct in _FLOAT else "1"
            prod = " * ".join([x] * int(abs(e)))
            return prod if e > 0 else f"1.0 / ({prod})"
        if e == 0.5:
            return f"tl.sqrt({x})"
        if e == -0.5:
            return f"tl.rsqrt({x})"
        magnitude = f"tl.exp2({literal(e)} * tl.log2(tl.abs({x})))"
        if e == int(e):  # an odd integer power keeps the sign
            return magnitude if int(e) % 2 == 0 else f"tl.where({x} < 0, -{magnitude}, {magnitude})"
        return f"tl.exp2({literal(e)} * tl.log2({x}))"
    return f"tl.exp2({_paren(c.t(1, ct='f32'))} * tl.log2({_paren(c.t(0, ct='f32'))}))"


def _clamp(c: OpCtx) -> str:
    x = c.t(0)
    lo, hi = c.arg(1, "min"), c.arg(2, "max")
    if c.node.op == "clamp_max":
        lo, hi = None, c.arg(1, "max")
    if lo is not None:
        x = f"tl.maximum({x}, {c.code(lo)})"
    if hi is not None:
        x = f"tl.minimum({x}, {c.code(hi)})"
    return x


def _gelu(c: OpCtx) -> str:
    mode = c.arg(1, "approximate", "none")
    return _act("gelu_tanh" if mode == "tanh" else "gelu", _paren(c.t(0)))


def _elu(c: OpCtx) -> str:
    x = _paren(c.t(0))
    alpha, scale, input_scale = (literal(float(c.arg(i, k, 1.0))) for i, k in
                                 ((1, "alpha"), (2, "scale"), (3, "input_scale")))
    inner = f"tl.where({x} > 0.0, {x}, {alpha} * (tl.exp({x} * {input_scale}) - 1.0))"
    return inner if scale == "1.0" else f"{scale} * {inner}"


def _where(c: OpCtx) -> str:
    cond = c.t(0, ct="i1") if isinstance(c.arg(0), Value) and c.arg(0).dtype == "bool" else \
        f"{_paren(c.t(0))} != 0"
    return f"tl.where({cond}, {c.t(1)}, {c.t(2)})"


def _masked_fill(c: OpCtx) -> str:
    return f"tl.where({c.t(1, ct='i1')}, {c.t(2)}, {c.t(0)})"


def _cast(c: OpCtx) -> str:
    src = c.arg(0)
    expr = c.code(src, ctype(src.dtype))
    if c.ct == ctype(src.dtype):
        return expr
    if c.ct == "i1":
        return f"{_paren(expr)} != 0"
    return f"{_paren(expr)}.to({TL_TYPES[c.ct]})"


def _constant(pos: int | None, default=None):
    def fn(c: OpCtx) -> str:
        value = default if pos is None else c.arg(pos, "fill_value", default)
        if isinstance(value, Value):  # fill.Tensor: a one-element tensor
            return c.code(value)
        return literal(value, c.ct)
    return fn


def _arange(c: OpCtx) -> str:
    args = [a for a in c.node.args if not isinstance(a, (DType,))]
    start, step = 0, 1
    if c.node.overload in ("start", "start_step", "start_out"):
        start = args[0]
        if c.node.overload == "start_step" and len(args) > 2:
            step = args[2]
    i = c.dims()[0]
    expr = i if step == 1 else f"{i} * {literal(step, 'i64')}"
    if start != 0:
        expr = f"{literal(start, 'i64')} + {expr}"
    return expr if c.ct not in _FLOAT else f"({expr}).to({TL_TYPES[c.ct]})"


def _triangle(lower: bool):
    def fn(c: OpCtx) -> str:
        d = c.dims()
        k = c.arg(1, "diagonal", 0)
        keep = f"({d[-1]} - {d[-2]}) {'<=' if lower else '>='} {k}"
        return f"tl.where({keep}, {c.t(0)}, {literal(0, c.ct)})"
    return fn


def _softplus(c: OpCtx) -> str:
    return _act("softplus", _paren(c.t(0)), beta=literal(float(c.arg(1, "beta", 1.0))),
                threshold=literal(float(c.arg(2, "threshold", 20.0))))


OPS: dict[str, Callable[[OpCtx], str]] = {
    "add": _add("+"), "sub": _add("-"), "rsub": _add("-", swap=True), "mul": _binary("*"),
    "div": _div, "neg": _unary("-{x}"), "abs": _unary("tl.abs({x})"),
    "reciprocal": _unary("1.0 / {x}"), "sqrt": _unary("tl.sqrt({x})"),
    "rsqrt": _unary("tl.rsqrt({x})"), "exp": _unary("tl.exp({x})"),
    "exp2": _unary("tl.exp2({x})"), "expm1": _unary("(tl.exp({x}) - 1.0)"),
    "log": _unary("tl.log({x})"), "log2": _unary("tl.log2({x})"),
    "log10": _unary("(tl.log({x}) * 0.4342944819032518)"), "log1p": _unary("tl.log(1.0 + {x})"),
    "sin": _unary("tl.sin({x})"), "cos": _unary("tl.cos({x})"),
    "tan": _unary("(tl.sin({x}) / tl.cos({x}))"), "erf": _unary("tl.erf({x})"),
    "erfc": _unary("(1.0 - tl.erf({x}))"), "floor": _unary("tl.floor({x})"),
    "ceil": _unary("tl.ceil({x})"), "trunc": lambda c: _trunc(_paren(c.t(0))),
    "sign": _unary("tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, 0.0))"),
    "sgn": _unary("tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, 0.0))"),
    "pow": _pow, "clamp": _clamp, "clamp_min": _clamp, "clamp_max": _clamp,
    "minimum": lambda c: f"tl.minimum({c.t(0)}, {c.t(1)})",
    "maximum": lambda c: f"tl.maximum({c.t(0)}, {c.t(1)})",
    "relu": lambda c: f"tl.maximum({c.t(0)}, {literal(0, c.ct)})",
    "gelu": _gelu, "silu": lambda c: _act("silu", _paren(c.t(0))),
    "sigmoid": lambda c: f"tl.sigmoid({c.t(0)})",
    "tanh": lambda c: _act("tanh", _paren(c.t(0))), "mish": lambda c: _act("mish", _paren(c.t(0))),
    "softplus": _softplus, "elu": _elu,
    "leaky_relu": lambda c: _act("leaky_relu", _paren(c.t(0)),
                                 negative_slope=literal(float(c.arg(1, "negative_slope", 0.01)))),
    "hardtanh": lambda c: _act("hardtanh", _paren(c.t(0)),
                               min_val=literal(float(c.arg(1, "min_val", -1.0))),
                               max_val=literal(float(c.arg(2, "max_val", 1.0)))),
    "hardsigmoid": lambda c: _act("hardsigmoid", _paren(c.t(0))),
    "hardswish": lambda c: _act("hardswish", _paren(c.t(0))),
    "threshold": lambda c: f"tl.where({_paren(c.t(0))} > {c.t(1)}, {c.t(0)}, {c.t(2)})",
    "_prelu_kernel": lambda c: f"tl.where({_paren(c.t(0))} > 0.0, {c.t(0)}, "
                               f"{_paren(c.t(1))} * {_paren(c.t(0))})",
    "remainder": lambda c: f"{_paren(c.t(0))} - tl.floor({_paren(c.t(0))} / {_paren(c.t(1))}) "
                           f"* {_paren(c.t(1))}",
    "fmod": lambda c: f"{_paren(c.t(0))} - "
                      f"{_trunc('(' + _paren(c.t(0)) + ' / ' + _paren(c.t(1)) + ')')} "
                      f"* {_paren(c.t(1))}",
    "xlogy": lambda c: f"tl.where({_paren(c.t(0))} == 0.0, 0.0, {_paren(c.t(0))} * "
                       f"tl.log({c.t(1)}))",
    "eq": _compare("=="), "ne": _compare("!="), "lt": _compare("<"), "le": _compare("<="),
    "gt": _compare(">"), "ge": _compare(">="),
    "logical_not": lambda c: f"{_paren(c.t(0, ct=c.kind(c.arg(0))))} == 0",
    "bitwise_not": lambda c: f"{_paren(c.t(0, ct='i1'))} == 0",
    "logical_and": lambda c: f"({_paren(c.t(0, ct=c.kind(c.arg(0))))} != 0) & "
                             f"({_paren(c.t(1, ct=c.kind(c.arg(1))))} != 0)",
    "logical_or": lambda c: f"({_paren(c.t(0, ct=c.kind(c.arg(0))))} != 0) | "
                            f"({_paren(c.t(1, ct=c.kind(c.arg(1))))} != 0)",
    "logical_xor": lambda c: f"({_paren(c.t(0, ct=c.kind(c.arg(0))))} != 0) ^ "
                             f"({_paren(c.t(1, ct=c.kind(c.arg(1))))} != 0)",
    "bitwise_and": lambda c: f"{_paren(c.t(0))} & {_paren(c.t(1))}",
    "bitwise_or": lambda c: f"{_paren(c.t(0))} | {_paren(c.t(1))}",
    "isnan": lambda c: f"{_paren(c.t(0, ct='f32'))} != {_paren(c.t(0, ct='f32'))}",
    "isinf": lambda c: f"tl.abs({c.t(0, ct='f32')}) == float(\"inf\")",
    "where": _where, "masked_fill": _masked_fill,
    "to": _cast, "_to_copy": _cast, "type_as": _cast, "_to_dtype": _cast,
    "copy": lambda c: c.t(1), "fill": _constant(1), "zero": _constant(None, 0),
    "full": _constant(1), "full_like": _constant(1), "new_full": _constant(2),
    "scalar_tensor": _constant(0), "zeros": _constant(None, 0), "zeros_like": _constant(None, 0),
    "new_zeros": _constant(None, 0), "ones": _constant(None, 1), "ones_like": _constant(None, 1),
    "new_ones": _constant(None, 1), "arange": _arange, "tril": _triangle(True),
    "triu": _triangle(False),
}
INDEX_OPS = {"gather", "index_select", "embedding"}
CAT_OPS = {"cat", "concat", "concatenate"}
KNOWN = set(OPS) | INDEX_OPS | CAT_OPS | POOL_OPS


def emit_op(em: Emitter, node: Node, out: Value, frame: Frame) -> Code:
    """The value ``out`` of a pointwise or index op at ``frame``."""
    if node.op in INDEX_OPS:
        return _index_op(em, node, out, frame)
    if node.op in CAT_OPS:
        return _cat(em, node, out, frame)
    if node.op in POOL_OPS:
        return pool(em, node, out, frame)
    fn = OPS.get(node.op)
    if fn is None:
        raise Unfusable(node, f"no expression for {node.aten}")
    ctx = OpCtx(em, node, out, frame)
    expr = fn(ctx)
    if re.fullmatch(r"[A-Za-z_]\w*", expr) or _is_number(expr) or expr.startswith(
            ("(-", 'float("', '-float("')):  # a no-op cast or a constant: no line of its own
        return Code(expr, ctx.ct)
    name = em.w.assign("v", expr, comment=f"{node.aten} (op {node.index})", shared=True)
    return Code(name, ctx.ct)


def _index_op(em: Emitter, node: Node, out: Value, frame: Frame) -> Code:
    """gather / index_select / embedding: a load at indices read from another tensor."""
    d = em.dims(frame)
    if node.op == "gather":
        src, dim, index = node.args[0], node.args[1] % len(node.args[0].shape), node.args[2]
        i = em.value(index, Frame(index.shape, d))
        idx = list(d)
        idx[dim] = i.expr
    elif node.op == "index_select":
        src, dim, index = node.args[0], node.args[1] % len(node.args[0].shape), node.args[2]
        i = em.value(index, Frame(index.shape, (d[dim],)))
        idx = list(d)
        idx[dim] = i.expr
    else:  # embedding(weight, indices)
        src, index = node.args[0], node.args[1]
        i = em.value(index, Frame(index.shape, d[:-1]))
        idx = [i.expr, d[-1]]
    return em.value(src, Frame(src.shape, tuple(idx)))


def _cat(em: Emitter, node: Node, out: Value, frame: Frame) -> Code:
    """cat along one dim (RoPE's rotate-half, a concatenated projection): every piece is read at
    the output's index less the piece's start, clamped into the piece so that every load is in
    bounds, and the piece the index falls in is chosen with nested ``tl.where``."""
    dim = node.arg(1, "dim", 0) % len(out.shape)
    pieces = [p for p in node.args[0] if isinstance(p, Value) and len(p.shape) == len(out.shape)
              and p.shape[dim] != Size(0)]  # torch.cat also takes (and skips) empty 1-D pieces
    if not pieces:
        raise Unfusable(node, "a cat of empty tensors")
    d = em.dims(frame)
    i, starts, codes = d[dim], [], []
    for p in pieces:
        start = " + ".join(em.w.size(q.shape[dim]) for q in pieces[:len(codes)]) or "0"
        length = p.shape[dim]
        if length == ONE:
            local = "0"
        else:
            local = i if start == "0" else f"{i} - ({start})"
            local = em.w.index(f"tl.minimum(tl.maximum({local}, 0), {em.w.size(length)} - 1)")
        idx = list(d)
        idx[dim] = local
        codes.append(em.value(p, Frame(p.shape, tuple(idx))))
        starts.append(start)
    ct = ctype(out.dtype)
    expr = codes[-1].expr
    for start, code in zip(reversed(starts[1:]), reversed(codes[:-1])):
        expr = f"tl.where({i} < {start}, {code.expr}, {expr})"
    if len(codes) == 1:
        return Code(expr, ct)
    return Code(em.w.assign("v", expr, comment=f"{node.aten} (op {node.index})", shared=True), ct)


# --- the fused pointwise kernel ---------------------------------------------------------------
def write_pointwise(w: KernelWriter, em: Emitter, outputs: list[Value]) -> None:
    """Body of a kernel computing ``outputs`` (equal numel) over one flat block of elements.

    Its index arithmetic is in ``INDEX`` (a constexpr: int32 unless a tensor it touches is too
    large, see ``modelnew.index_type``): int64 division and modulo are emulated on the GPU,
    several instructions each, per element."""
    w.define("offs", "tl.program_id(0).to(INDEX) * BLOCK + tl.arange(0, BLOCK)",
             frozenset("x"))
    w.define("mask", "offs < n_elements", frozenset("x"))
    w.masks[frozenset("x")] = "mask"
    w.axis_vars["x"] = "offs"
    w.tiles[frozenset("x")] = "[BLOCK]"
    for v in outputs:
        frame = Frame(v.shape, flat="offs")
        em.store(v, frame, em.value(v, frame))
