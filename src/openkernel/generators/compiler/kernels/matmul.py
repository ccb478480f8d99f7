"""Tiled matmul (nn.Linear, addmm, mm, bmm, matmul) with its pointwise epilogue fused.

The classic Triton tiling: each program owns a BLOCK_M x BLOCK_N tile of C (of one batch for
bmm), walks K in BLOCK_K steps accumulating in float32 with ``tl.dot`` (float32 inputs in full
precision, or TF32 where cuBLAS would use it: on a GPU with
``torch.backends.cuda.matmul.allow_tf32``, the opt-in ``eval_config.allow_tf32``; full
precision either as IEEE float32 FMAs or, ``TF32X3``, as three TF32 tensor-core products per
tile, the split-precision product whose error is float32's: on Hopper TF32 runs at ~7x the
float32 FMA rate), and computes the epilogue (bias, activations, residuals, scales: any pointwise chain over
broadcast tensors) on the tile before its only store. GROUP_M orders
the tiles so that neighbouring programs share rows of A (L2 reuse). Operands are passed with
their strides, so a transposed weight (``x @ W.t()``) is read in place. Hopper's tensor cores
(wgmma) take 32-bit (TF32) tiles only K-major in shared memory (transposed ones only in 16-bit
types): a float32 dot of an N-major B (``A @ B``, ``att @ v``) or an M-major A runs ~2x slower,
measured on the H200. Where a float32 operand's view is not K-contiguous by construction
(:func:`contiguous_dim`), the forward may copy it so first (the tunable ``KMAJOR``:
:data:`K_MAJOR`), a transposing copy of ~1% of the GEMM's time; timing decides.

Where C's rows are short enough for one tile (plan.py's ``ROW_TILE``), the kernel may own whole
rows instead (BLOCK_N spans N, masked past it) and reduce them in its epilogue, in registers
(softmax, log_softmax, logsumexp, sum, mean, max: kernels/reductions.py's one pass at the tile),
so C is never stored and read back by a reduction kernel of its own. A reduction over groups
of a row (GroupNorm's statistics, where N is a power of two) is computed for every column of
the tile: the tile reshaped to [BLOCK_M, groups, group size], reduced, and broadcast back.
"""

from __future__ import annotations

from dataclasses import dataclass

from openkernel.generators.compiler.emit import Code, Emitter, Frame, Unfusable, ctype
from openkernel.generators.compiler.graph import VIEW_OPS, Node, Value
from openkernel.generators.compiler.kernels.reductions import ReductionAnchor, masked
from openkernel.generators.compiler.sizes import ONE
from openkernel.generators.compiler.writer import KernelWriter

_MAIN_LOOP = '''pid = tl.program_id(0)
num_m = tl.cdiv(M, BLOCK_M)
num_n = tl.cdiv(N, BLOCK_N)
# Grouped ordering: GROUP_M row-tiles are visited together, so A's rows stay in L2.
group = GROUP_M * num_n
first_m = (pid // group) * GROUP_M
size_m = min(num_m - first_m, GROUP_M)
pid_m = first_m + (pid % group) % size_m
pid_n = (pid % group) // size_m
rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)[:, None]
rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)[None, :]
rk = tl.arange(0, BLOCK_K)
a_ptrs = a_ptr{a_batch} + rm * stride_am + rk[None, :] * stride_ak
b_ptrs = b_ptr{b_batch} + rk[:, None] * stride_bk + rn * stride_bn
acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
for k in range(0, K, BLOCK_K):
    # Masks on the K tail as well as the M/N edges: zeros add nothing to the dot.
    a = tl.load(a_ptrs, mask=(rm < M) & (rk[None, :] + k < K), other=0.0)
    b = tl.load(b_ptrs, mask=(rk[:, None] + k < K) & (rn < N), other=0.0)
    if UPCAST:  # the Triton interpreter multiplies bfloat16 tiles as integers
        a, b = a.to(tl.float32), b.to(tl.float32)
    if IEEE and TF32X3:  # float32-level accuracy on tensor cores: three TF32 products a tile
        acc = tl.dot(a, b, acc, input_precision="tf32x3")
    elif IEEE:  # float32 in full precision (TF32 only where cuBLAS's would be)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    a_ptrs += BLOCK_K * stride_ak
    b_ptrs += BLOCK_K * stride_bk
mask_m = rm < M
mask_n = rn < N
mask = mask_m & mask_n'''


class MatmulAnchor:
    """The accumulator is the matmul's value at its own tile indices, and nowhere else; a
    reduction of the tile's whole rows is computed there too when the kernel owns them
    (``rows``)."""

    def __init__(self, mm: Node, idx: tuple[str, ...], rows: ReductionAnchor | None = None) -> None:
        self.mm, self.idx, self.rows = mm, idx, rows

    def __call__(self, em: Emitter, node: Node, v: Value, f: Frame) -> Code:
        if node is not self.mm:
            if self.rows is not None and node.op == "reduce":
                return self.rows(em, node, v, f)
            if em.reaches(node.args[0], self.mm):  # it reduces this matmul's result: store that
                raise Unfusable(self.mm, "a reduction of the matmul's result")
            raise Unfusable(node, "a second matmul or a reduction in a matmul's epilogue")
        out = self.mm.outputs[0].shape
        free = {"rm": out[-2], "rn": out[-1]} | ({"batch": out[0]} if len(out) == 3 else {})
        if not em.same_place(em.dims(f), self.idx, free):
            raise Unfusable(node, "the matmul's result used at other indices")
        return Code("acc", "f32")


@dataclass
class GroupAnchor(ReductionAnchor):
    """Reductions over groups of ``size`` consecutive columns of a row (a GroupNorm's mean and
    variance over a [M, groups, size, ...] view of C), each group's value held by its columns.
    N is a power of two (plan.py), so columns past it (BLOCK_N > N) form whole groups of their
    own, masked."""

    size: int = 1

    def reduce(self, em: Emitter, node: Node, x: Code) -> Code:
        kind = node.kwargs["kind"]
        tile, acc = masked(kind, x, ctype(node.outputs[0].dtype))
        fn = {"sum": "sum", "amax": "max", "amin": "min"}[kind]
        shape = f"[BLOCK_M, BLOCK_N // {self.size}, {self.size}]"
        w = em.w
        part = w.assign("g", f"tl.{fn}(tl.reshape({tile}, {shape}), axis=2, keep_dims=True)",
                        comment=f"{node.aten} (op {node.index}), per group", axes=frozenset("rc"))
        expr = f"tl.reshape(tl.broadcast_to({part}, {shape}), [BLOCK_M, BLOCK_N])"
        return Code(w.assign("r", expr, axes=frozenset("rc")), acc)


def write_matmul(w: KernelWriter, em: Emitter, mm: Node, outputs: list[Value],
                 rows: ReductionAnchor | None = None) -> None:
    """Body of the kernel: main loop, then each output's epilogue at the tile. ``rows``: the
    program owns whole rows of C and reduces them (an output is then an element or a row)."""
    batched = mm.op == "bmm"
    for line in _MAIN_LOOP.format(a_batch=" + batch * stride_ab" if batched else "",
                                  b_batch=" + batch * stride_bb" if batched else "").split("\n"):
        w.line(line)
    if batched:
        w.block.lines.insert(0, "batch = tl.program_id(1).to(tl.int64)")
    # A reduction's results vary along the rows axis "r" (reductions.py): name the tile's so.
    m, n = ("r", "c") if rows is not None else ("m", "n")
    for name in ("rm", "mask_m"):
        w.axes[name] = frozenset(m)
    for name in ("rn", "mask_n"):
        w.axes[name] = frozenset(n)
    w.axes["mask"] = w.axes["acc"] = frozenset(m + n)
    w.axis_vars.update({m: "rm", n: "rn"})
    w.masks.update({frozenset(m): "mask_m", frozenset(n): "mask_n", frozenset(m + n): "mask"})
    w.tiles.update({frozenset(m): "[BLOCK_M, 1]", frozenset(n): "[1, BLOCK_N]",
                    frozenset(m + n): "[BLOCK_M, BLOCK_N]"})
    out = mm.outputs[0]
    names = ("batch", "rm", "rn") if batched else ("rm", "rn")
    idx = tuple("0" if s == ONE else i for s, i in zip(out.shape, names))
    free = {"rm": out.shape[-2], "rn": out.shape[-1]} | ({"batch": out.shape[0]} if batched else {})
    tile = Frame(out.shape, idx)
    if isinstance(rows, GroupAnchor):  # (a 2-D GEMM: C's rows are the view's first dim)
        rows.row_idx = tuple(i for i, s in zip(("rm", f"rn // {rows.size}"), rows.domain.kept)
                             if s != ONE)
        rows.tile = Frame(rows.domain.shape, flat=em.flat(tile))
    elif rows is not None:
        rows.row_idx, rows.tile = tuple(i for i in idx[:-1] if i != "0"), tile
    if rows is not None:
        rows.free, rows.col, rows.n_cols = free, "rn", "N"
    em.anchor = MatmulAnchor(mm, idx, rows)
    for v in outputs:
        if rows is not None and v.numel == rows.domain.rows and v.numel != out.numel:
            frame = Frame(v.shape, rows.row_frame_idx(v.shape))  # one value per row
        else:
            frame = Frame(v.shape, flat=em.flat(tile))
        em.store(v, frame, em.value(v, frame))


def torch_view(v: Value, names: dict[str, str], stored: set[str], bases: list) -> str:
    """Python (for the forward) making a matmul operand as a torch view of a stored tensor
    (appended to ``bases``)."""
    if v.leaf or v.id in stored:
        bases.append(v)
        return names[v.id]
    node = v.node
    if node.op not in VIEW_OPS:
        raise Unfusable(node, "a matmul operand computed in place")
    src = torch_view(node.args[0], names, stored, bases)
    op, args = node.op, node.args
    shape = ", ".join(s.code() for s in v.shape)
    if op in ("alias", "detach", "clone", "contiguous", "lift_fresh", "lift_fresh_copy", "real"):
        return src
    if op in ("view", "_unsafe_view", "reshape", "flatten", "view_as", "squeeze", "unsqueeze",
              "as_strided"):
        return f"{src}.reshape({shape}{',' if len(v.shape) == 1 else ''})"
    if op in ("expand", "expand_as"):
        return f"{src}.expand({shape}{',' if len(v.shape) == 1 else ''})"
    if op == "permute":
        return f"{src}.permute({', '.join(str(d) for d in args[1])})"
    if op == "t":
        return f"{src}.t()"
    if op == "flip":  # a copy in torch, not a view: still the operand's values
        return f"{src}.flip({list(args[1])})"
    if op == "transpose":
        return f"{src}.transpose({args[1]}, {args[2]})"
    dim = node.kwargs.get("dim", args[1] if len(args) > 1 else 0)
    if op in ("select", "unbind"):
        index = v.index if op == "unbind" else node.kwargs.get("index", args[2])
        return f"{src}.select({dim}, {_py(index)})"
    if op == "slice" and (node.kwargs.get("step", args[4] if len(args) > 4 else 1) or 1) == 1:
        start = node.kwargs.get("start", args[2] if len(args) > 2 else 0) or 0
        return f"{src}.narrow({dim}, {_py(start)}, {v.shape[dim % len(v.shape)].code()})"
    raise Unfusable(node, f"no torch view for {node.aten}")


# The forward's copy of an operand into a K-major layout (modelnew.py writes it where KMAJOR).
K_MAJOR = '''

def _k_major(t, k):
    """``t`` with its K dim (``k``: -1 for A, -2 for B) of stride 1, copied so where it is not
    (Hopper's tensor cores take TF32 tiles K-major only). An operand broadcast over the batch
    (stride 0) is copied once, not once per batch."""
    if t.stride(k) == 1 or t.shape[k] <= 1:
        return t
    if t.dim() == 3 and t.stride(0) == 0 and t.shape[0] > 1:
        return _k_major(t[:1], k).expand(t.shape)
    return t.transpose(k, -1).contiguous().transpose(k, -1)
'''


def contiguous_dim(v: Value, stored: set[str]) -> int | None:
    """The dim of ``v``'s torch view (:func:`torch_view`) whose stride is 1, None where planning
    cannot tell. Every base is contiguous: the forward makes its inputs so, weights are loaded
    into contiguous parameters, and buffers are ``torch.empty``."""
    if v.leaf or v.id in stored:
        return len(v.shape) - 1
    node = v.node
    op, args = node.op, node.args
    inner = contiguous_dim(args[0], stored) if node.op in VIEW_OPS else None
    if inner is None:
        return None
    src = len(args[0].shape)
    if op in ("alias", "detach", "clone", "contiguous", "lift_fresh", "lift_fresh_copy", "real",
              "flip", "slice"):
        return inner
    if op in ("view", "_unsafe_view", "reshape", "flatten", "view_as", "squeeze", "unsqueeze",
              "as_strided"):  # (a reshape keeps a contiguous last dim last, or copies)
        return len(v.shape) - 1 if inner == src - 1 else None
    if op in ("expand", "expand_as"):
        return inner + len(v.shape) - src
    if op == "permute":
        order = [d % src for d in args[1]]
        return order.index(inner)
    if op in ("t", "transpose"):
        if src < 2:
            return inner
        pair = (0, 1) if op == "t" else (args[1] % src, args[2] % src)
        return pair[1] if inner == pair[0] else pair[0] if inner == pair[1] else inner
    if op in ("select", "unbind"):
        dim = node.kwargs.get("dim", args[1] if len(args) > 1 else 0) % src
        return None if dim == inner else inner - (dim < inner)
    return None


def to_k_major(mm: Node, stored: set[str]) -> tuple[str, ...]:
    """The operands ("a", "b") of a float32 matmul whose views are not K-contiguous by
    construction: those the forward copies K-major under ``KMAJOR``. Where K is 1, or the
    operand's other dim is 1 and innermost, any K stride reads as K-major."""
    if mm.args[0].dtype != "float32":
        return ()
    out = []
    for name, v, k in (("a", mm.args[0], -1), ("b", mm.args[1], -2)):
        inner, shape = contiguous_dim(v, stored), v.shape
        other = -2 if k == -1 else -1
        if inner != len(shape) + k and shape[k] != ONE and \
                not (inner == len(shape) + other and shape[other] == ONE):
            out.append(name)
    return tuple(out)


def _py(value) -> str:
    return value.code() if hasattr(value, "code") else str(value)
