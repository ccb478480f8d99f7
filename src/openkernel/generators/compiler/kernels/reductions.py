"""Row reductions with pointwise prologue and epilogue, in one kernel.

A kernel reduces one tensor shape S over one set of dims D, any number of times (softmax: a
max, then a sum of exponentials; LayerNorm: a mean, then a variance; cross-entropy's rows: a
max and a sum). Each program owns ROWS rows (the kept dims, in row-major order) and walks the
row's columns (the reduced dims): the reductions' inputs are computed there from loads and
pointwise ops, the reduced values are broadcast back into the element-level outputs
(``exp(x - max) / sum``) or stored per row (``mean``).

Two variants, chosen at call time from the row length: *one pass* when a row fits MAX_FUSED
columns (the row is read once into registers, every reduction and output computed from it),
and *looped* otherwise (one loop per level of dependent reductions, then one for the outputs,
so registers stay bounded). In the looped variant a sum of ``exp(a - h(max(a)))`` is folded
into the loop of its max (online softmax): the running sum is rescaled whenever the running
max grows, so softmax and logsumexp read a long row twice instead of three times; a variance's
sum of squares is folded into the loop of its mean (Welford, welford.py), so a long LayerNorm
or GroupNorm row is read twice too.

A reduction over middle dims, dim 1 of an (A, R, B) tensor, has rows whose columns lie B apart
in memory: a program walking one row strides through it. Such domains get the *middle* layout
instead: the looped kernel transposed, a program owning ROWS neighbouring outputs along B (one
``a``) and walking R in BLOCK_C steps, its tiles [BLOCK_C, ROWS] coalesced along B and reduced
over axis 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openkernel.generators.compiler.emit import (
    TL_TYPES,
    Code,
    Emitter,
    Frame,
    Unfusable,
    ctype,
)
from openkernel.generators.compiler.graph import Node, Value
from openkernel.generators.compiler.kernels import welford
from openkernel.generators.compiler.sizes import ONE, Size, numel
from openkernel.generators.compiler.writer import KernelWriter

ROW, TILE = frozenset("r"), frozenset("rc")
_INIT = {"sum": "0", "amax": '-float("inf")', "amin": 'float("inf")', "all": "1", "any": "0"}


@dataclass(frozen=True)
class Domain:
    """What a reduction kernel iterates over: a shape and the dims it reduces."""

    shape: tuple[Size, ...]
    dims: tuple[int, ...]

    @staticmethod
    def of(node: Node) -> "Domain":
        return Domain(tuple(node.args[0].shape), tuple(node.kwargs["dims"]))

    @property
    def kept(self) -> tuple[Size, ...]:
        return tuple(s for d, s in enumerate(self.shape) if d not in self.dims)

    @property
    def reduced(self) -> tuple[Size, ...]:
        return tuple(s for d, s in enumerate(self.shape) if d in self.dims)

    @property
    def rows(self) -> Size:
        return numel(self.kept)

    @property
    def cols(self) -> Size:
        return numel(self.reduced)

    @property
    def inner(self) -> tuple[Size, ...]:
        """The kept dims after the reduced ones (B of a dim-1 reduction of (A, R, B))."""
        return tuple(self.shape[max(self.dims) + 1:]) if self.dims else ()

    @property
    def middle(self) -> bool:
        """Reduced dims are one block with kept dims after it: the middle layout applies."""
        block = list(range(min(self.dims), max(self.dims) + 1)) if self.dims else []
        return list(self.dims) == block and numel(self.inner) != ONE


@dataclass
class ReductionAnchor:
    """Computes the group's reductions where the emitter meets them (see ``__call__``)."""

    domain: Domain
    row_idx: tuple[str, ...] = ()
    col_idx: tuple[str, ...] = ()
    tile: Frame | None = None
    results: dict = field(default_factory=dict)  # node id -> Code at the row frame
    live: dict = field(default_factory=dict)  # node id -> Code overriding results (online)
    order: list[Node] = field(default_factory=list)  # in the order they were computed
    deps: dict = field(default_factory=dict)  # node id -> ids of group reductions it needs
    lazy: bool = True  # one pass: compute a reduction when first met
    axis: int = 1  # the tile's column axis: 1 in the row layout, 0 in the middle one
    # The program indices and their bounds, the column index and the row length, as the
    # kernel names them (a GEMM that reduces its own rows: kernels/matmul.py's rm, rn, N).
    free: dict | None = None
    col: str = "col"
    n_cols: str = "n_cols"

    def row_frame_idx(self, shape) -> tuple[str, ...]:
        """Indices of a row-level value of ``shape`` (kept dims, with or without keepdim)."""
        it = iter(self.row_idx)
        if len(shape) == len(self.domain.shape):
            return tuple("0" if d in self.domain.dims or s == ONE else next(it)
                         for d, s in enumerate(shape))
        it = iter(i for i, s in zip(self.row_idx, self.domain.kept))
        return tuple("0" if s == ONE else next(it) for s in shape)

    def __call__(self, em: Emitter, node: Node, v: Value, f: Frame) -> Code:
        if node.op != "reduce" or Domain.of(node) != self.domain:
            raise Unfusable(node, "another reduction")
        free = self.free or {"row": self.domain.rows, "col": self.domain.cols}
        if not em.same_place(em.dims(f), self.row_frame_idx(v.shape), free):
            raise Unfusable(node, "a reduction used at other indices")
        if id(node) in self.live:
            return self.live[id(node)]
        if id(node) in self.results:
            return self.results[id(node)]
        if not self.lazy:
            raise Unfusable(node, "a reduction needed before it is computed")
        x = em.value(node.args[0], self.tile)
        code = self.reduce(em, node, x)
        self.results[id(node)] = code
        self.order.append(node)
        return code

    def reduce(self, em: Emitter, node: Node, x: Code) -> Code:
        """The reduction of the rows held in registers (``x``: its input at the tile)."""
        return _reduce_block(em, node, x, self.col, self.n_cols)


def masked(kind: str, x: Code, out_ct: str) -> tuple[str, str]:
    """(the tile with padding neutral for ``kind``, the accumulator type)."""
    acc = out_ct if kind in ("sum",) else x.ctype
    value = x.expr if x.ctype == acc else f"{x.expr}.to({TL_TYPES[acc]})"
    if kind in ("all", "any"):
        acc, value = "i32", f"({x.expr} != 0).to(tl.int32)"
    init = _INIT.get(kind, '-float("inf")' if kind == "argmax" else 'float("inf")')
    if acc not in ("f32", "f64") and "inf" in init:
        init = "-2147483647" if init.startswith("-") else "2147483647"
    return f"tl.where(mask, {value}, {init})", acc


def _reduce_block(em: Emitter, node: Node, x: Code, col: str, n_cols: str) -> Code:
    """One-pass reduction of a whole row held in registers (``col``: the column index)."""
    kind, out = node.kwargs["kind"], node.outputs[0]
    tile, acc = masked(kind, x, ctype(out.dtype))
    w = em.w
    if kind in ("argmax", "argmin"):
        best = w.assign("m", f"tl.{'max' if kind == 'argmax' else 'min'}({tile}, axis=1, "
                        "keep_dims=True)", axes=ROW)
        expr = (f"tl.min(tl.where(({x.expr} == {best}) & mask, {col}, {n_cols}), axis=1, "
                "keep_dims=True).to(tl.int64)")
        return Code(w.assign("r", expr, comment=f"{node.aten} (op {node.index})", axes=ROW), "i64")
    fn = {"sum": "sum", "amax": "max", "amin": "min", "all": "min", "any": "max"}[kind]
    expr = f"tl.{fn}({tile}, axis=1, keep_dims=True)"
    if kind in ("all", "any"):
        expr = f"{expr} != 0"
        acc = "i1"
    return Code(w.assign("r", expr, comment=f"{node.aten} (op {node.index})", axes=ROW), acc)


def _preamble(w: KernelWriter, em: Emitter, anchor: ReductionAnchor) -> None:
    if anchor.axis == 0:
        _middle_preamble(w, em, anchor)
        return
    # index arithmetic in INDEX (int32 unless a tensor is too large: modelnew.index_type)
    w.define("row", "tl.program_id(0).to(INDEX) * ROWS + tl.arange(0, ROWS)[:, None]",
             frozenset("r"))
    w.define("row_mask", "row < n_rows", frozenset("r"))
    w.masks[frozenset("r")] = "row_mask"
    w.axis_vars.update(r="row", c="col")
    w.tiles[frozenset("r")] = "[ROWS, 1]"
    w.tiles[frozenset("c")] = "[1, BLOCK_C]"
    w.tiles[frozenset("rc")] = "[ROWS, BLOCK_C]"
    kept = anchor.domain.kept
    anchor.row_idx = tuple(i for i, s in zip(em.dims(Frame(kept, flat="row")), kept) if s != ONE) \
        if kept else ()


def _middle_preamble(w: KernelWriter, em: Emitter, anchor: ReductionAnchor) -> None:
    """A program's ROWS outputs: one ``outer`` index (the kept dims before the reduced ones) and
    ROWS neighbouring ``inner`` ones (the kept dims after): contiguous, so loads coalesce."""
    d = anchor.domain
    inner = d.inner
    outer = d.shape[:min(d.dims)]
    w.define("n_blocks", "tl.cdiv(n_inner, ROWS)", frozenset())
    w.define("outer", "tl.program_id(0).to(INDEX) // n_blocks", frozenset())
    w.define("inner", "(tl.program_id(0).to(INDEX) % n_blocks) * ROWS + "
             "tl.arange(0, ROWS)[None, :]", ROW)
    w.define("row", "outer * n_inner + inner", ROW)
    w.define("row_mask", "inner < n_inner", ROW)
    # What index comparisons (Emitter.same_place) evaluate them as, ``row`` being free there.
    b = w.size(numel(inner))
    w.exprs.update(outer=f"row // {b}", inner=f"row % {b}")
    w.masks[ROW] = "row_mask"
    w.axis_vars.update(r="row", c="col")
    w.tiles[ROW] = "[1, ROWS]"
    w.tiles[frozenset("c")] = "[BLOCK_C, 1]"
    w.tiles[TILE] = "[BLOCK_C, ROWS]"
    idx = em.dims(Frame(outer, flat="outer")) + em.dims(Frame(inner, flat="inner"))
    anchor.row_idx = tuple(i for i, s in zip(idx, d.kept) if s != ONE)
    kept = Frame(tuple(s for s in d.kept if s != ONE), anchor.row_idx)
    w.block.cache[("origin", "row", kept.shape)] = anchor.row_idx
    w.block.cache[("flat of", em._composed(kept))] = "row"


def _columns(w: KernelWriter, em: Emitter, anchor: ReductionAnchor, start: str = "") -> None:
    w.define("col", (f"{start} + " if start else "")
             + f"tl.arange(0, BLOCK_C){'[:, None]' if anchor.axis == 0 else '[None, :]'}",
             frozenset("c"))
    w.define("col_mask", "col < n_cols", frozenset("c"))
    w.define("mask", "row_mask & col_mask", frozenset("rc"))
    w.masks[frozenset("c")] = "col_mask"
    w.masks[frozenset("rc")] = "mask"
    red = anchor.domain.reduced
    cols = em.dims(Frame(red, flat="col")) if red else ()
    rows = iter(anchor.row_idx)
    colit = iter(cols)
    idx = []
    for d, s in enumerate(anchor.domain.shape):
        if d in anchor.domain.dims:
            idx.append(next(colit))
        else:
            idx.append("0" if s == ONE else next(rows))
    anchor.tile = Frame(anchor.domain.shape, tuple(idx))
    if anchor.axis == 0:  # the tile's offset as a sum over ``inner``: Triton sees it contiguous
        b = numel(anchor.domain.inner)
        pos = w.index(f"outer * {w.size(anchor.domain.cols * b)} + col * {w.size(b)} + inner")
        w.block.cache[("flat of", em._composed(anchor.tile))] = pos


def _stores(em: Emitter, anchor: ReductionAnchor, outputs: list[Value], element: bool) -> None:
    d = anchor.domain
    for v in outputs:
        if (v.numel == numel(d.shape)) != element or (not element and v.numel != d.rows):
            continue
        # A row-level output's row-major position is its row (the kept dims, in order).
        frame = Frame(v.shape, flat=em.flat(anchor.tile) if element else "row")
        em.store(v, frame, em.value(v, frame))


def level(outputs: list[Value], domain: Domain) -> str:
    """Why these outputs cannot come from one kernel over ``domain`` ("" when they can)."""
    for v in outputs:
        if v.numel not in (numel(domain.shape), domain.rows):
            return f"{v.id} is neither a row nor an element of the reduced tensor"
    return ""


def write_one_pass(w: KernelWriter, em: Emitter, anchor: ReductionAnchor,
                   outputs: list[Value]) -> None:
    """Body of the one-pass kernel; records the reductions' order and dependencies."""
    _preamble(w, em, anchor)
    _columns(w, em, anchor)
    em.anchor = anchor
    # Row-level outputs first: what they need is computed once, then the element-level ones.
    _stores(em, anchor, outputs, element=False)
    _stores(em, anchor, outputs, element=True)


def _levels(anchor: ReductionAnchor, graph_deps) -> list[list[Node]]:
    # What each reduction's input is computed from (not what the walk happened to reach:
    # a shared sub-result may already have been computed by then).
    anchor.deps = {id(n): graph_deps(n.args[0]) - {id(n)} for n in anchor.order}
    depth: dict[int, int] = {}
    for node in anchor.order:  # dependencies come first in this order
        depth[id(node)] = 1 + max((depth[d] for d in anchor.deps.get(id(node), ())), default=-1)
    out: list[list[Node]] = []
    for node in anchor.order:
        while len(out) <= depth[id(node)]:
            out.append([])
        out[depth[id(node)]].append(node)
    return out


def _online_pair(graph_deps, anchor: ReductionAnchor, node: Node):
    """(max node, shift value) when ``node`` sums exp(a - h(max(a))) (online-foldable)."""
    if node.kwargs["kind"] != "sum":
        return None
    needs = anchor.deps.get(id(node), set())
    if len(needs) != 1:
        return None
    (m_id,) = needs
    m = next(n for n in anchor.order if id(n) == m_id)
    e = node.args[0]
    if m.kwargs["kind"] != "amax" or e.node is None or e.node.op != "exp":
        return None
    d = e.node.args[0]
    if not isinstance(d, Value) or d.node is None or d.node.op != "sub" or \
            d.node.kwargs.get("alpha", d.node.args[2] if len(d.node.args) > 2 else 1) != 1:
        return None
    a, shift = d.node.args[0], d.node.args[1]
    if a is not m.args[0] or not isinstance(shift, Value) or shift.numel != anchor.domain.rows:
        return None
    if graph_deps(a) or graph_deps(shift) != {id(m)}:
        return None
    return m, shift


def write_looped(w: KernelWriter, em: Emitter, anchor: ReductionAnchor, found: ReductionAnchor,
                 outputs: list[Value], graph_deps) -> None:
    """Body of the looped kernel, from the one-pass kernel's reductions (``found``)."""
    anchor.order = found.order
    anchor.lazy = False
    em.anchor = anchor
    _preamble(w, em, anchor)
    levels = _levels(anchor, graph_deps)
    folded: dict[int, tuple] = {}
    for k, nodes in enumerate(levels[1:], start=1):
        for node in list(nodes):
            pair = _online_pair(graph_deps, anchor, node)
            if pair is not None and pair[0] in levels[k - 1]:
                folded[id(pair[0])] = (node, pair[1])
                nodes.remove(node)
    # A variance's sum of squares joins the loop of its mean (Welford): see welford.py.
    variances = welford.fold_variances(levels, anchor.domain, graph_deps)
    for k, nodes in enumerate(levels):
        stats = [var for var in variances if var.level == k]
        if not nodes and not stats:
            continue
        accs = {}
        for node in nodes:
            accs[id(node)] = _init_acc(w, node)
            if id(node) in folded:
                accs[id(folded[id(node)][0])] = _init_acc(w, folded[id(node)][0])
        for var in stats:
            welford.init(w, var)
        with w.loop("for start in range(0, n_cols, BLOCK_C):"):
            _columns(w, em, anchor, "start")
            for node in nodes:
                x = em.value(node.args[0], anchor.tile)
                if id(node) in folded:  # the lanes' max before this step, for the rescaling
                    accs[id(node)].append(w.assign("m_old", accs[id(node)][0], axes=TILE))
                _update(w, node, x, accs[id(node)])
                if id(node) in folded:
                    _update_online(w, em, anchor, node, folded[id(node)], accs)
            for var in stats:
                welford.update(w, em, anchor.tile, var)
        for node in nodes:
            anchor.results[id(node)] = _finish(w, node, accs[id(node)], anchor.axis)
            if id(node) in folded:
                total, shift = folded[id(node)]
                anchor.results[id(total)] = _finish_online(w, em, anchor, node, total, shift, accs)
        for var in stats:
            welford.combine(w, var, anchor.axis)
        for var in variances:
            if var.finish == k:
                frame = Frame(var.c.shape, anchor.row_frame_idx(var.c.shape))
                anchor.results[id(var.node)] = welford.finish(w, em, frame, var)
    _stores(em, anchor, outputs, element=False)
    if any(v.numel == numel(anchor.domain.shape) for v in outputs):
        with w.loop("for start in range(0, n_cols, BLOCK_C):"):
            _columns(w, em, anchor, "start")
            _stores(em, anchor, outputs, element=True)


def _init_acc(w: KernelWriter, node: Node) -> list[str]:
    kind, ct = node.kwargs["kind"], ctype(node.outputs[0].dtype)
    if kind in ("argmax", "argmin"):
        worst = '-float("inf")' if kind == "argmax" else 'float("inf")'
        ct_in = ctype(node.args[0].dtype)
        worst = worst if ct_in in ("f32", "f64") else (
            "-2147483647" if kind == "argmax" else "2147483647")
        return [w.assign("acc", f"tl.full({w.tiles[TILE]}, {worst}, "
                         f"{TL_TYPES.get(ct_in, 'tl.float32')})", axes=TILE),
                w.assign("acc", f"tl.zeros({w.tiles[TILE]}, tl.int64)", axes=TILE)]
    acc_ct = "i32" if kind in ("all", "any") else (ct if kind == "sum" else ctype(node.args[0].dtype))
    init = _INIT[kind]
    if acc_ct not in ("f32", "f64") and "inf" in init:
        init = "-2147483647" if init.startswith("-") else "2147483647"
    return [w.assign("acc", f"tl.full({w.tiles[TILE]}, {init}, {TL_TYPES[acc_ct]})", axes=TILE)]


def _update(w: KernelWriter, node: Node, x: Code, acc: list[str]) -> None:
    kind = node.kwargs["kind"]
    tile, _ = masked(kind, x, ctype(node.outputs[0].dtype))
    if kind in ("argmax", "argmin"):
        better = w.assign("better", f"{tile} {'>' if kind == 'argmax' else '<'} {acc[0]}")
        w.line(f"{acc[1]} = tl.where({better}, col, {acc[1]})")
        w.line(f"{acc[0]} = tl.where({better}, {tile}, {acc[0]})")
        return
    op = {"sum": "{a} + {t}", "amax": "tl.maximum({a}, {t})", "amin": "tl.minimum({a}, {t})",
          "all": "tl.minimum({a}, {t})", "any": "tl.maximum({a}, {t})"}[kind]
    w.line(f"{acc[0]} = " + op.format(a=acc[0], t=tile) + f"  # {node.aten} (op {node.index})")


def _finish(w: KernelWriter, node: Node, acc: list[str], axis: int) -> Code:
    kind = node.kwargs["kind"]
    if kind in ("argmax", "argmin"):
        best = w.assign("m", f"tl.{'max' if kind == 'argmax' else 'min'}({acc[0]}, "
                        f"axis={axis}, keep_dims=True)", axes=ROW)
        expr = (f"tl.min(tl.where({acc[0]} == {best}, {acc[1]}, n_cols), axis={axis}, "
                "keep_dims=True)")
        return Code(w.assign("r", expr + ".to(tl.int64)", axes=ROW), "i64")
    fn = {"sum": "sum", "amax": "max", "amin": "min", "all": "min", "any": "max"}[kind]
    expr = f"tl.{fn}({acc[0]}, axis={axis}, keep_dims=True)"
    if kind in ("all", "any"):
        return Code(w.assign("r", expr + " != 0", axes=ROW), "i1")
    ct = ctype(node.outputs[0].dtype) if kind == "sum" else ctype(node.args[0].dtype)
    return Code(w.assign("r", expr, axes=ROW), ct)


def _shift_at(em: Emitter, anchor: ReductionAnchor, m: Node, shift: Value, code: str) -> str:
    """The shift h(max) with the max bound to ``code`` (lane-wise running values)."""
    with em.rebound(m), _live(anchor, m, code):
        return em.value(shift, Frame(shift.shape, anchor.row_frame_idx(shift.shape))).expr


class _live:
    def __init__(self, anchor: ReductionAnchor, m: Node, code: str) -> None:
        self.anchor, self.m, self.code = anchor, m, code

    def __enter__(self):
        self.anchor.live[id(self.m)] = Code(self.code, ctype(self.m.outputs[0].dtype))

    def __exit__(self, *exc):
        del self.anchor.live[id(self.m)]


def _update_online(w: KernelWriter, em: Emitter, anchor: ReductionAnchor, m: Node, pair,
                   accs) -> None:
    """One step of the online sum: rescale the lanes' sums by how much their max moved."""
    total, shift = pair
    m_acc, s_acc = accs[id(m)][0], accs[id(total)][0]
    old = accs[id(m)][-1]  # the lanes' max before this step (saved before _update)
    with em.rebound(m), _live(anchor, m, m_acc):
        e = em.value(total.args[0], anchor.tile)
        new_shift = em.value(shift, Frame(shift.shape, anchor.row_frame_idx(shift.shape))).expr
    old_shift = _shift_at(em, anchor, m, shift, old)
    # A lane whose max is still -inf has only seen -inf: exp(-inf - -inf) is NaN, its sum is 0.
    w.line(f"{s_acc} = {s_acc} * tl.where({old_shift} == {new_shift}, 1.0, "
           f"tl.exp({old_shift} - {new_shift})) + tl.where(mask & ({new_shift} > -float(\"inf\")), "
           f"{e.expr}, 0.0)  # {total.aten} (op {total.index}), online")


def _finish_online(w: KernelWriter, em: Emitter, anchor: ReductionAnchor, m: Node, total: Node,
                   shift: Value, accs) -> Code:
    lanes = _shift_at(em, anchor, m, shift, accs[id(m)][0])
    row = em.value(shift, Frame(shift.shape, anchor.row_frame_idx(shift.shape))).expr
    s_acc = accs[id(total)][0]
    expr = (f"tl.sum({s_acc} * tl.where({lanes} == {row}, 1.0, tl.exp({lanes} - {row})), "
            f"axis={anchor.axis}, keep_dims=True)")
    return Code(w.assign("r", expr, axes=ROW), ctype(total.outputs[0].dtype))
