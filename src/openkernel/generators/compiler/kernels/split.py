"""Split reductions: few long rows, each shared by several programs, as torch.compile does.

One program per row (or ROWS rows) leaves the GPU idle when rows are few and long: BatchNorm's
training form reduces an (N, C, H, W) input over dims (0, 2, 3), C rows of N*H*W columns, 64
programs on 132 SMs. Where the unsplit grid has fewer than SPLIT programs (a tunable; 0: never),
each row's columns are cut at call time into ``n_parts`` parts of ``chunk`` columns (whole
BLOCK_C steps; at least MIN_STEPS of them), one program a part, in two kernels:

* ``partial``: each program reduces its part of its row (ROWS rows in the middle layout) and
  stores one partial a reduction in scratch, ``[n_rows, n_parts]``: a sum, max, min, all or
  any, and a variance's Welford (mean, m2, count) triple;
* ``split``: the same grid; each program first combines its row's partials (Chan's combine for
  the triples, welford.py), then computes the row-level outputs and its part of the element
  ones (BatchNorm's normalised elements: each element read once more, by as many programs).

Rows stay in the layout of their unsplit kernel (reductions.py): columns along the row in the
row layout (coalesced along the innermost reduced dims, H*W of a BatchNorm), neighbouring
outputs along the kept inner dims in the middle one. What a partial cannot carry keeps whole
rows, and the kernel's description says why: argmax/argmin, and a reduction that needs
another's result (softmax's sum of exp(x - max)).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openkernel.generators.compiler.emit import Code, Emitter, Frame, Unfusable, ctype
from openkernel.generators.compiler.graph import Node, Value
from openkernel.generators.compiler.kernels import welford
from openkernel.generators.compiler.kernels.reductions import (
    _INIT,
    ROW,
    Domain,
    ReductionAnchor,
    _columns,
    _finish,
    _init_acc,
    _levels,
    _preamble,
    _stores,
    _update,
)
from openkernel.generators.compiler.sizes import numel
from openkernel.generators.compiler.writer import KernelWriter

MIN_STEPS = 2  # BLOCK_C steps a part walks at least (fewer: not worth the scratch round trip)
SPLITTABLE = {"sum", "amax", "amin", "all", "any"}
TORCH = {"f32": "torch.float32", "f64": "torch.float64", "i64": "torch.int64",
         "i32": "torch.int32"}

# The candidate's helper that picks the split from the sizes at call time.
CHOOSE = f'''def _split(programs, n_cols, block):
    """(parts, columns a part) for a reduction whose unsplit grid has ``programs`` programs:
    about SPLIT programs in all, each part whole steps of ``block`` columns, at least
    {MIN_STEPS} of them; (1, n_cols) where the grid is large enough or rows are short."""
    steps = triton.cdiv(n_cols, block)
    parts = min(triton.cdiv(SPLIT, max(programs, 1)), steps // {MIN_STEPS})
    if programs >= SPLIT or parts < 2:
        return 1, n_cols
    chunk = triton.cdiv(steps, parts) * block
    return triton.cdiv(n_cols, chunk), chunk'''


@dataclass
class Split:
    """A reduction kernel's split form: the scratch partials its two kernels pass, or why not."""

    why: str = ""  # why rows are never split ("" when they can be)
    parts: list[str] = field(default_factory=list)  # each partial's ctype, in pointer order
    element: bool = False  # it writes element-level outputs (the split kernel's grid has parts)

    @property
    def pointers(self) -> list[str]:
        return [f"part{k}_ptr" for k in range(len(self.parts))]


def _acc_ct(node: Node) -> str:
    kind = node.kwargs["kind"]
    if kind in ("all", "any"):
        return "i32"
    return ctype(node.outputs[0].dtype) if kind == "sum" else ctype(node.args[0].dtype)


def _one_level(anchor: ReductionAnchor, graph_deps) -> tuple[list[Node], list] | str:
    """The reductions and Welford variances, all in one loop; or why they cannot be."""
    levels = _levels(anchor, graph_deps)
    variances = welford.fold_variances(levels, anchor.domain, graph_deps)
    if any(levels[1:]):  # (the first deeper level with a reduction: one may be empty)
        node = next(n for level in levels[1:] for n in level)
        return f"{node.aten} (op {node.index}) needs another reduction's result first"
    nodes = levels[0] if levels else []
    for node in nodes:
        if node.kwargs["kind"] not in SPLITTABLE:
            return f"{node.kwargs['kind']} keeps whole rows ({node.aten}, op {node.index})"
        if _acc_ct(node) not in TORCH:
            return f"no scratch for a {node.kwargs['kind']} in {_acc_ct(node)}"
    if not nodes and not variances:
        return "no reduction"
    return nodes, variances


def _split_preamble(w: KernelWriter, em: Emitter, anchor: ReductionAnchor) -> None:
    _preamble(w, em, anchor)
    w.define("part", "tl.program_id(1)", frozenset())
    w.define("lo", "part.to(INDEX) * chunk", frozenset(), comment="this program's columns")


def write_split(make, recompute, domain: Domain, axis: int, found: ReductionAnchor,
                outputs: list[Value], graph_deps) -> tuple[dict[str, KernelWriter], Split]:
    """The two kernels' bodies ("partial", "split") and their Split, or ({}, why not)."""
    bodies: dict[str, KernelWriter] = {}
    split = Split(element=any(v.numel == numel(domain.shape) for v in outputs))
    try:
        for variant in ("partial", "split"):
            w, em = make()
            em.recompute = recompute
            anchor = ReductionAnchor(domain, axis=axis)
            anchor.order, anchor.lazy = found.order, False
            em.anchor = anchor
            _split_preamble(w, em, anchor)
            found_level = _one_level(anchor, graph_deps)
            if isinstance(found_level, str):
                return {}, Split(why=found_level)
            nodes, variances = found_level
            parts = _partials(w, em, anchor, nodes, variances) if variant == "partial" else \
                _combined(w, em, anchor, nodes, variances, split, outputs)
            split.parts = parts
            bodies[variant] = w
    except Unfusable as err:
        return {}, Split(why=str(err))
    return bodies, split


def _partials(w: KernelWriter, em: Emitter, anchor: ReductionAnchor, nodes: list[Node],
              variances: list) -> list[str]:
    """Reduce this program's part of its rows; store one partial each (Welford: three)."""
    accs = {id(node): _init_acc(w, node) for node in nodes}
    for var in variances:
        welford.init(w, var)
    with w.loop("for start in range(lo, lo + chunk, BLOCK_C):"):
        _columns(w, em, anchor, "start")
        for node in nodes:
            _update(w, node, em.value(node.args[0], anchor.tile), accs[id(node)])
        for var in variances:
            welford.update(w, em, anchor.tile, var)
    results = [_finish(w, node, accs[id(node)], anchor.axis) for node in nodes]
    for var in variances:
        welford.combine(w, var, anchor.axis)
        results += [Code(name, ctype(var.node.outputs[0].dtype)) for name in var.row]
    for k, code in enumerate(results):
        w.line(f"tl.store(part{k}_ptr + row * n_parts + part, {code.expr}, mask=row_mask)")
    return [_acc_ct(node) for node in nodes] + \
        [ctype(var.node.outputs[0].dtype) for var in variances for _ in range(3)]


def _combined(w: KernelWriter, em: Emitter, anchor: ReductionAnchor, nodes: list[Node],
              variances: list, split: Split, outputs: list[Value]) -> list[str]:
    """Combine the row's partials into its reductions, then write the outputs of this part."""
    axis = anchor.axis
    w.define("parts", f"tl.arange(0, SPLITS){'[None, :]' if axis == 1 else '[:, None]'}",
             frozenset())
    w.define("part_mask", "row_mask & (parts < n_parts)", ROW)
    cts: list[str] = []

    def load(other: str, ct: str) -> str:
        k = len(cts)
        cts.append(ct)
        return w.assign("p", f"tl.load(part{k}_ptr + row * n_parts + parts, mask=part_mask, "
                        f"other={other})", axes=ROW)

    for node in nodes:
        kind, ct = node.kwargs["kind"], _acc_ct(node)
        init = _INIT[kind]
        if ct not in ("f32", "f64") and "inf" in init:
            init = "-2147483647" if init.startswith("-") else "2147483647"
        tile = load(init, ct)
        fn = {"sum": "sum", "amax": "max", "amin": "min", "all": "min", "any": "max"}[kind]
        expr = f"tl.{fn}({tile}, axis={axis}, keep_dims=True)"
        if kind in ("all", "any"):
            expr, ct = f"{expr} != 0", "i1"
        anchor.results[id(node)] = Code(w.assign(
            "r", expr, comment=f"{node.aten} (op {node.index}), its parts combined", axes=ROW), ct)
    for var in variances:
        var.accs = tuple(load("0.0", ctype(var.node.outputs[0].dtype)) for _ in range(3))
        welford.combine(w, var, axis)
    for var in variances:
        frame = Frame(var.c.shape, anchor.row_frame_idx(var.c.shape))
        anchor.results[id(var.node)] = welford.finish(w, em, frame, var)
    # Every part's program writes the row-level outputs, the same values (no part is special).
    _stores(em, anchor, outputs, element=False)
    if split.element:
        with w.loop("for start in range(lo, lo + chunk, BLOCK_C):"):
            _columns(w, em, anchor, "start")
            _stores(em, anchor, outputs, element=True)
    return cts


def launch(name: str, split: Split, ptrs: list[str], syms: list[str], middle: bool,
           programs: str, rows: str, block: str, unsplit: list[str], call,
           index: str, fn: str = "") -> list[str]:
    """Forward lines: the split kernels where ``_split`` splits, else the ``unsplit`` launch.

    ``ptrs``, ``syms``: the kernel's tensors and size symbols; ``programs``: the unsplit grid's
    size, ``rows`` and ``block`` the split kernels' ROWS and BLOCK_C; ``call``: the writer of
    a launch's lines (modelnew.py's); ``index``: the ``INDEX=...`` argument of the launch;
    ``fn``: the jit functions' name, ``name``'s own unless it shares another kernel's."""
    fn = fn or name
    scratch = [f"{name}_p{k}" for k in range(len(split.parts))]
    common = ptrs + scratch + ["n_rows", "n_cols"] + (["n_inner"] if middle else []) + \
        ["parts", "chunk"] + syms
    tiles = [f"ROWS={rows}", f"BLOCK_C={block}", index]
    launches = [f"{p} = torch.empty((n_rows, parts), device=device, dtype={TORCH[ct]})"
                for p, ct in zip(scratch, split.parts)]
    launches += call(f"{fn}_partial[({programs}, parts)]", common + tiles
                     + ["num_warps=NUM_WARPS", "num_stages=NUM_STAGES"])
    launches += call(f"{fn}_split[({programs}, {'parts' if split.element else 1})]",
                     common + tiles + ["SPLITS=triton.next_power_of_2(parts)",
                                       "num_warps=NUM_WARPS", "num_stages=NUM_STAGES"])
    return [f"parts, chunk = _split({programs}, n_cols, {block})", "if parts > 1:"] + \
        ["    " + x for x in launches] + ["else:"] + ["    " + x for x in unsplit]
