"""Scans (cumsum, cumprod) along one dim: each row in BLOCK_C steps, a carry between steps.

A scan kernel has the reduction kernels' frame (rows of the kept dims, columns along the
scanned dim) and their looped form: per step, the block's values (any pointwise prologue
recomputed at its indices: a mask, a flip, a narrow) are scanned with ``tl.cumsum`` or
``tl.cumprod``, combined with the carry (the previous step's last value in each row), stored,
and the carry moves to this block's last valid column. What uses the scan's result reads it
from memory (a flip of the result, the exclusive form's shift).
"""

from __future__ import annotations

from openkernel.generators.compiler.emit import Code, Emitter, Frame, Unfusable, ctype
from openkernel.generators.compiler.graph import Node, Value
from openkernel.generators.compiler.kernels.reductions import (
    Domain,
    ReductionAnchor,
    _columns,
    _preamble,
)
from openkernel.generators.compiler.writer import KernelWriter

SCAN_OPS = {"cumsum", "cumprod"}
_TILE = frozenset("rc")


def scan_domain(node: Node) -> Domain:
    src = node.args[0]
    dim = node.arg(1, "dim", 0)
    return Domain(tuple(src.shape), (dim % max(1, len(src.shape)),))


def write_scan(w: KernelWriter, em: Emitter, node: Node, out: Value) -> None:
    """Body of the looped scan kernel writing ``out`` (the scan's own result)."""
    ct = ctype(out.dtype)
    if ct not in ("f32", "f64"):
        raise Unfusable(node, "an integer scan")
    product = node.op == "cumprod"
    neutral = "1.0" if product else "0.0"
    anchor = ReductionAnchor(scan_domain(node))
    _preamble(w, em, anchor)
    carry = w.assign("carry", f"tl.full([ROWS, 1], {neutral}, tl.float32)", axes=frozenset("r"))
    with w.loop("for start in range(0, n_cols, BLOCK_C):"):
        _columns(w, em, anchor, "start")
        x = em.value(node.args[0], anchor.tile)
        block = w.assign("x", f"tl.where(mask, {x.expr}, {neutral})", axes=_TILE)
        scanned = (f"tl.cumprod({block}, axis=1) * {carry}" if product else
                   f"tl.cumsum({block}, axis=1) + {carry}")
        result = w.assign("scan", scanned, comment=f"{node.aten} (op {node.index})", axes=_TILE)
        em.store(out, Frame(out.shape, anchor.tile.idx), Code(result, ct))
        # the carry: this block's last valid column, in each row
        w.line(f"{carry} = tl.sum(tl.where(col == tl.minimum(start + BLOCK_C, n_cols) - 1, "
               f"{result}, 0.0), axis=1, keep_dims=True)")
