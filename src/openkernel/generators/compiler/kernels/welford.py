"""A variance in one pass of a looped reduction: Welford's update per lane, Chan's combine across.

A looped kernel meets a variance as two sums on two levels: ``sum(a)``, then ``sum((a - c)^2)``
with ``c`` a row value computed from the first (the mean). Read as written that is a loop for the
mean, a loop for the squares and the loop for the outputs: three reads of a long row. Instead
each lane keeps Welford's running (mean, m2, count) of ``a`` in the earlier loop, the lanes are
merged with Chan's parallel combine (``tl.reduce`` over the triples), and the sum of squares
about *any* row value ``c`` is then ``m2 + n * (mean - c)^2``, exactly: both terms are
non-negative, so nothing cancels in fp32 (the textbook ``E[a^2] - E[a]^2`` does, on a row of
large mean and small spread). A LayerNorm or GroupNorm whose rows are longer than MAX_FUSED then
reads each row twice (statistics, then outputs), a ``var``/``std`` of a long row once.
"""

from __future__ import annotations

from dataclasses import dataclass

from openkernel.generators.compiler.emit import TL_TYPES, Code, Emitter, Frame, ctype
from openkernel.generators.compiler.graph import Node, Value
from openkernel.generators.compiler.sizes import ONE, numel
from openkernel.generators.compiler.writer import KernelWriter

COMBINE = '''@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    """Chan's parallel combine of two (mean, m2, count) partials (an empty one changes nothing)."""
    n = n_a + n_b
    w_b = tl.where(n == 0.0, 0.0, n_b / tl.where(n == 0.0, 1.0, n))
    delta = tl.where(mean_a == mean_b, 0.0, mean_b - mean_a)  # inf - inf is not a spread
    return mean_a + delta * w_b, m2_a + m2_b + delta * delta * n_a * w_b, n'''


@dataclass
class Variance:
    """A sum of squares about a row value, computed from Welford statistics of ``a``."""

    node: Node  # the reduction: sum((a - c)^2)
    a: Value
    c: Value
    level: int  # the loop that gathers the statistics of ``a``
    finish: int  # the level after whose loop ``c`` is known and the result written
    accs: tuple[str, ...] = ()  # per lane: mean, m2, count
    row: tuple[str, ...] = ()  # per row, after the combine


def _squared(v: Value) -> Value | None:
    """``d`` when ``v`` is ``d * d`` or ``d ** 2``."""
    node = v.node
    if node is None:
        return None
    if node.op == "mul" and len(node.args) == 2 and node.args[0] is node.args[1]:
        return node.args[0]
    if node.op == "pow" and len(node.args) == 2 and isinstance(node.args[1], (int, float)) \
            and not isinstance(node.args[1], bool) and node.args[1] == 2:
        return node.args[0]
    return None


def _squares_about(node: Node, domain) -> tuple[Value, Value] | None:
    """(a, c) when ``node`` sums (a - c)^2 with ``a`` an element and ``c`` a row of the domain
    (kept dims in place, reduced dims of size one: the keepdim mean a variance subtracts)."""
    if node.kwargs["kind"] != "sum":
        return None
    d = _squared(node.args[0])
    if d is None or d.node is None or d.node.op != "sub" or len(d.node.args) < 2:
        return None
    if d.node.kwargs.get("alpha", d.node.args[2] if len(d.node.args) > 2 else 1) != 1:
        return None
    a, c = d.node.args[0], d.node.args[1]
    row = tuple(ONE if k in domain.dims else s for k, s in enumerate(domain.shape))
    if not isinstance(a, Value) or not isinstance(c, Value) or tuple(a.shape) != domain.shape \
            or tuple(d.shape) != domain.shape or tuple(c.shape) != row:
        return None
    if ctype(node.outputs[0].dtype) not in ("f32", "f64") or numel(row) == numel(domain.shape):
        return None
    return a, c


def fold_variances(levels: list[list[Node]], domain, graph_deps) -> list[Variance]:
    """Move each foldable sum of squares out of ``levels`` into the loop where ``a`` is known."""
    depth = {id(n): k for k, nodes in enumerate(levels) for n in nodes}
    out: list[Variance] = []
    for k, nodes in enumerate(levels):
        for node in list(nodes):
            pair = _squares_about(node, domain)
            if pair is None:
                continue
            a, c = pair
            deps_a, deps_c = graph_deps(a), graph_deps(c)
            if any(d not in depth for d in deps_a | deps_c):
                continue  # computed in another reduction's loop (an online sum)
            at = 1 + max((depth[d] for d in deps_a), default=-1)
            if at >= k:
                continue
            nodes.remove(node)
            out.append(Variance(node, a, c, at, k - 1))
    return out


def init(w: KernelWriter, var: Variance) -> None:
    t = TL_TYPES[ctype(var.node.outputs[0].dtype)]
    tile = w.tiles[frozenset("rc")]
    var.accs = tuple(w.assign(p, f"tl.zeros({tile}, {t})", axes=frozenset("rc"))
                     for p in ("wf_mean", "wf_m2_", "wf_n"))


def update(w: KernelWriter, em: Emitter, tile: Frame, var: Variance) -> None:
    """One step of each lane's Welford update (masked lanes keep their statistics)."""
    mean, m2, n = var.accs
    ct = ctype(var.node.outputs[0].dtype)
    x = em.value(var.a, tile)
    value = x.expr if x.ctype == ct else f"{x.expr}.to({TL_TYPES[ct]})"
    w.line(f"{n} = {n} + tl.where(mask, 1.0, 0.0)  # {var.node.aten} (op {var.node.index}), "
           "Welford")
    delta = w.assign("wf_d", f"tl.where(mask, {value} - {mean}, 0.0)")
    w.line(f"{mean} = {mean} + {delta} / tl.maximum({n}, 1.0)")
    w.line(f"{m2} = {m2} + tl.where(mask, {delta} * ({value} - {mean}), 0.0)")


def combine(w: KernelWriter, var: Variance, axis: int) -> None:
    """The lanes' statistics merged into the row's (Chan)."""
    var.row = tuple(w.fresh(p) for p in ("wf_mean", "wf_m2_", "wf_n"))
    for name in var.row:
        w.axes[name] = frozenset("r")
    w.line(f"{', '.join(var.row)} = tl.reduce(({', '.join(var.accs)}), {axis}, "
           "_welford_combine, keep_dims=True)")


def finish(w: KernelWriter, em: Emitter, row_frame: Frame, var: Variance) -> Code:
    """sum((a - c)^2) = m2 + n * (mean - c)^2, with ``c`` now known."""
    mean, m2, n = var.row
    c = em.value(var.c, row_frame)
    off = w.assign("wf_d", f"{mean} - {c.expr}", axes=frozenset("r"))
    expr = f"{m2} + {n} * {off} * {off}"
    return Code(w.assign("r", expr, comment=f"{var.node.aten} (op {var.node.index}), Welford",
                         axes=frozenset("r")), ctype(var.node.outputs[0].dtype))
