"""Matrix-vector products as reductions: GEMMs with one column of C (or a few), or one row.

The tiled GEMM (kernels/matmul.py) computes at least 16 columns of C a tile (tl.dot's smallest)
and gives each program BLOCK_M rows over the whole depth K: with N = 1 it computes 16 columns
to keep one, and where rows are few and K long its few programs each walk all of K
(KernelBench's 4_Matrix_vector_multiplication_, 2048 x 1048576 by a vector: 32 programs, 23x
slower than cuBLAS's GEMV). Such a product is bound by reading A once, one FMA an element.

So before a Triton plan is made, :func:`lower_matvecs` rewrites each ``mm``/``bmm`` (addmm and
linear are ``mm`` by then: graph.py) whose static N is at most ``widest`` into an elementwise
product summed over K, which the row reductions compute (kernels/reductions.py: programs own
rows (m, n) of A * B^T and walk K, split over several programs where rows are few:
kernels/split.py), the epilogue fused as any reduction's. A product with one row (M == 1, a
vector times a matrix) is summed over K down B's columns instead: the middle layout, whose
tiles are coalesced along N. Only static sizes decide: the trace keeps a dim of 1 static, but
an input's width of 4 follows the inputs (the held-out shapes may widen it), so such a GEMM
keeps its tile. The products and sums are float32 multiplies and adds whatever the TF32 flags
(float64 in float64; half types are computed in float32 inside kernels, as everywhere), and
the precision record says so of the kernel (library.kernel_precision). Library-backed plans
keep their GEMMs for cuBLAS.
"""

from __future__ import annotations

from openkernel.generators.compiler.graph import (
    MATMUL_OPS,
    Graph,
    Node,
    Value,
    _new,
    _reduce,
    split_op,
)
from openkernel.generators.compiler.sizes import ONE

# The widest N lowered: each of the N columns re-reads A's row (from cache), and a tile of
# tl.dot computes 16 columns however many are kept; wider GEMMs keep the tile.
FEW = 8
_FLOATS = {"float32", "float16", "bfloat16", "float64"}


def product_of(node: Node) -> str:
    """The GEMM op ("mm", "bmm", "addmm") a lowered ``reduce`` node computes; "" for others."""
    return node.kwargs.get("product", "") if node.op == "reduce" else ""


def lower_matvecs(graph: Graph, widest: int = FEW) -> int:
    """Rewrite, in place, the GEMMs of ``graph`` with at most ``widest`` static columns of C, or
    one row, into products summed over K; returns how many were."""
    nodes: list[Node] = []
    count = 0
    for node in graph.nodes:
        new = _lowered(graph, node, widest) if node.op in MATMUL_OPS else None
        nodes.extend(new or [node])
        count += bool(new)
    graph.nodes = nodes
    return count


def _lowered(g: Graph, node: Node, widest: int) -> list[Node] | None:
    a, b = node.args[0], node.args[1]
    if not (isinstance(a, Value) and isinstance(b, Value)) or len(node.outputs) != 1:
        return None
    out = node.outputs[0]
    if {a.dtype, b.dtype, out.dtype} - _FLOATS or len({a.dtype, b.dtype, out.dtype}) > 1:
        return None
    *batch, m, k = a.shape
    n, last = b.shape[-1], len(a.shape) - 1
    dt, nodes = out.dtype, []

    def add(op: str, args: list, shape) -> Value:
        nodes.append(_new(g, node, op, args, {}, shape, dt))
        return nodes[-1].outputs[0]

    if n.static and n.coeff <= widest:  # (M, N, K): row (m, n) reads A's row m, B's column n
        rows = add("view", [a, [*batch, m, ONE, k]], [*batch, m, ONE, k])
        cols = add("transpose", [b, last - 1, last], [*batch, n, k])
        cols = add("view", [cols, [*batch, ONE, n, k]], [*batch, ONE, n, k])
        terms = add("mul", [rows, cols], [*batch, m, n, k])
        dims, keepdim = (last + 1,), False
    elif m == ONE:  # (K, N), summed down the columns: tiles coalesced along N
        column = add("transpose", [a, last - 1, last], [*batch, k, ONE])
        terms = add("mul", [column, b], [*batch, k, n])
        dims, keepdim = (last - 1,), True
    else:
        return None
    total = _reduce(g, node, terms, "sum", dims, keepdim, dt, out)
    total.kwargs["product"] = split_op(node.aten)[0]
    return nodes + [total]
