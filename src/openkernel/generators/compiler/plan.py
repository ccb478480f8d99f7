"""From a traced graph to a list of kernels: what is stored in memory, and which kernel writes it.

Everything pointwise is recomputed where it is used (as Inductor does); only the forward's
outputs are stored at first. Each stored value is written by one kernel, whose kind follows the
first reduction or matmul met on the way down from the value: a matmul kernel (the value is its
epilogue), a reduction kernel (the value is a row or an element of the reduced tensor), or a
pointwise kernel. Whenever a kernel meets a reduction or matmul it cannot compute at its own
indices (:class:`~openkernel.generators.compiler.emit.Unfusable`), that node's result is stored
too and the plan is made again. A plan that fuses rows (``make_plan(rows=True)``) lets a matmul
kernel also reduce its own result's rows when they fit one tile (:data:`ROW_TILE` columns: a
softmax, logsumexp or mean over a GEMM's output features), instead of storing the result for a
reduction kernel to read back. Finally kernels of the same kind over the same domain that do
not depend on each other are merged (a LayerNorm's mean and output, cross-entropy's row max
and sum), so each row is read once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openkernel.generators.compiler.kernels.conv import conv_spec
from openkernel.generators.compiler.library import LIBRARY_OPS, library_call
from openkernel.generators.compiler.emit import Emitter, Unfusable, ctype
from openkernel.generators.compiler.graph import (
    MATMUL_OPS,
    VIEW_OPS,
    Graph,
    Node,
    Unknown,
    Value,
)
from openkernel.generators.compiler.kernels.matmul import (
    GroupAnchor,
    to_k_major,
    torch_view,
    write_matmul,
)
from openkernel.generators.compiler.kernels.pointwise import KNOWN, write_pointwise
from openkernel.generators.compiler.kernels.reductions import (
    Domain,
    ReductionAnchor,
    level,
    write_looped,
    write_one_pass,
)
from openkernel.generators.compiler.kernels.scan import SCAN_OPS, scan_domain, write_scan
from openkernel.generators.compiler.kernels.split import Split, write_split
from openkernel.generators.compiler.matvec import product_of
from openkernel.generators.compiler.sizes import Size
from openkernel.generators.compiler.views import view_problem
from openkernel.generators.compiler.writer import KernelWriter

SUPPORTED_REDUCTIONS = {"sum", "amax", "amin", "argmax", "argmin", "all", "any"}
LOOP_FROM = 1024  # rows of at most this many columns (when static) need no looped variant
SPLIT_BELOW = 2048  # a row-layout reduction of this many (static) rows or more is never split
ROW_TILE = 256  # a GEMM reduces its own rows when they fit this many columns (the widest BLOCK_N)


@dataclass
class Kernel:
    """One kernel of the plan, written."""

    kind: str  # "pointwise", "reduction", "matmul", "library" (a torch call: library.py),
    # "conv" (a convolution as a Triton implicit GEMM: compiler/kernels/conv.py) or "scan"
    # (cumsum, cumprod: compiler/kernels/scan.py)
    outputs: list[Value]
    anchor: Node | None = None  # the matmul, or a reduction of the domain
    domain: Domain | None = None  # (a matmul's: set when it reduces its own rows, over them)
    name: str = ""
    bodies: dict = field(default_factory=dict)  # variant ("", "fused", "looped", "middle")
    reads: list[Value] = field(default_factory=list)
    writes: list[Value] = field(default_factory=list)
    symbols: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # aten ops it computes, in trace order
    products: list[Node] = field(default_factory=list)  # GEMMs it sums as reductions (matvec.py)
    views: tuple[str, str] = ("", "")  # a matmul's operands as torch views (forward code)
    bases: list[Value] = field(default_factory=list)  # what those views are views of
    # A float32 matmul's operands ("a", "b") not K-contiguous by construction: the forward may
    # copy them so (the tunable KMAJOR; kernels/matmul.py)
    to_k_major: tuple[str, ...] = ()
    call: str = ""  # a library kernel's torch call (forward code)
    conv: object = None  # a "conv" kernel's ConvSpec (compiler/kernels/conv.py)
    split: Split | None = None  # a long-row reduction's split form, or why it has none

    @property
    def key(self):
        if self.kind in ("matmul", "library", "conv", "scan"):
            return (self.kind, id(self.anchor))
        if self.kind == "reduction":
            return ("reduction", self.domain)
        return ("pointwise", self.outputs[0].numel)

    @property
    def looped(self) -> bool:
        return "looped" in self.bodies

    @property
    def middle(self) -> bool:
        """A reduction over middle dims, in the middle layout (compiler/kernels/reductions.py)."""
        return "middle" in self.bodies

    @property
    def splits(self) -> bool:
        """Its rows may be split over several programs (compiler/kernels/split.py)."""
        return "split" in self.bodies


@dataclass
class Plan:
    graph: Graph
    kernels: list[Kernel]
    stored: set[str]
    names: dict[str, str]
    # Ops left to the vendor libraries: convolutions always (Triton ones replace them where the
    # plan asks, below), GEMMs too in a library-backed plan (``make_plan(library=True)``).
    library: frozenset[str] = frozenset(LIBRARY_OPS)
    rows: bool = False  # a GEMM reduces its own rows where they fit one tile (ROW_TILE)
    notes: dict = field(default_factory=dict)  # matmul node id -> why its rows are not fused

    @property
    def triton(self) -> list[Kernel]:
        return [k for k in self.kernels if k.kind != "library"]

    @property
    def matmuls(self) -> set[str]:
        """The GEMM ops written as Triton matmul kernels in this plan."""
        return MATMUL_OPS - self.library

    @property
    def kind(self) -> str:
        """The family's kind (compiler/families.py): its heaviest kernel's (a GEMM or a
        convolution, as a library call or a Triton kernel, makes it a matmul)."""
        kinds = {k.kind for k in self.kernels}
        return "matmul" if kinds & {"matmul", "conv", "library"} else "reduction" if kinds & {
            "reduction", "scan"} else "pointwise"


# --- what no kernel covers ---------------------------------------------------------------------
def _node_problem(node: Node) -> str:
    if node.note:
        return node.note
    for a in _flat(node.args) + _flat(list(node.kwargs.values())):
        if isinstance(a, Unknown):
            return f"an argument the trace could not place ({a.text})"
        if isinstance(a, Value) and a.kind == "lost":
            return f"a buffer left out of the state_dict ({a.id[2:]})"
    for v in node.outputs + node.tensors():
        if ctype(v.dtype) == "?":
            return f"dtype {v.dtype}"
    if node.op in VIEW_OPS:
        return view_problem(node)
    if node.op == "reduce":
        kind = node.kwargs["kind"]
        return "" if kind in SUPPORTED_REDUCTIONS else f"a {kind} reduction"
    if node.op in MATMUL_OPS or node.op in KNOWN or node.op in LIBRARY_OPS or node.op in SCAN_OPS:
        return ""
    return "no kernel"


def _flat(x) -> list:
    if isinstance(x, (list, tuple)):
        return [y for z in x for y in _flat(z)]
    return [x]


def uncovered(graph: Graph) -> str:
    """"no kernel covers aten.avg_pool2d.default (op 1 of 1)", or "" when all is covered."""
    if graph.problems:
        return "; ".join(dict.fromkeys(graph.problems))
    total = len(graph.trace.top_ops)
    found: dict[int, str] = {}
    for node in graph.reachable():
        problem = _node_problem(node)
        if problem and node.origin not in found:
            top = graph.trace.top_ops[node.origin] if node.origin < total else node.aten
            where = f"op {node.origin + 1} of {total}"
            if node.aten != top:
                where += f", in its decomposition: {node.aten}"
            if problem != "no kernel":
                where += f": {problem}"
            found[node.origin] = f"{top} ({where})"
    if not found:
        return ""
    return "no kernel covers " + ", ".join(found[k] for k in sorted(found))


# --- planning ---------------------------------------------------------------------------------
def _first_anchor(v: Value, stored: set[str], matmuls: set[str]) -> Node | None:
    """The first reduction or matmul on the way down from ``v`` (depth first, args in order)."""
    seen: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if x.node is None or (x.id in stored and x is not v) or id(x.node) in seen:
            continue
        node = x.node
        seen.add(id(node))
        if node.op == "reduce" or node.op in matmuls:
            return node
        stack.extend(reversed(node.tensors()))
    return None


def _spec(v: Value, plan: Plan) -> Kernel:
    if v.node is not None and v.node.op in plan.library:
        return Kernel("library", [v], v.node)
    if v.node is not None and v.node.op in SCAN_OPS:
        return Kernel("scan", [v], v.node, scan_domain(v.node))
    if plan.rows:
        kernel = _row_kernel(v, plan)
        if kernel is not None:
            return kernel
    anchor = _first_anchor(v, plan.stored, plan.matmuls)
    if anchor is None:
        return Kernel("pointwise", [v])
    if anchor.op in plan.matmuls:
        if v.numel != anchor.outputs[0].numel:
            raise Unfusable(anchor, "the matmul's result is broadcast")
        return Kernel("matmul", [v], anchor)
    domain = Domain.of(anchor)
    if level([v], domain):
        raise Unfusable(anchor, "a reduced value broadcast beyond its rows")
    return Kernel("reduction", [v], anchor, domain)


def _anchors(v: Value, stored: set[str], matmuls: set[str]) -> list[Node]:
    """Every reduction and matmul ``v`` is computed from inside one kernel (through reductions,
    not into a matmul's operands)."""
    seen: set[int] = set()
    out: list[Node] = []
    stack = [v]
    while stack:
        x = stack.pop()
        if x.node is None or (x.id in stored and x is not v) or id(x.node) in seen:
            continue
        seen.add(id(x.node))
        if x.node.op == "reduce" or x.node.op in matmuls:
            out.append(x.node)
        if x.node.op not in matmuls:
            stack.extend(x.node.tensors())
    return out


def _row_kernel(v: Value, plan: Plan) -> Kernel | None:
    """A matmul kernel that reduces its own result's rows, when ``v`` comes from one GEMM and
    reductions of whole rows of it that fit one tile; else None (why, in ``plan.notes``)."""
    anchors = _anchors(v, plan.stored, plan.matmuls)
    mms = [n for n in anchors if n.op in plan.matmuls]
    reductions = [n for n in anchors if n.op == "reduce"]
    if len(mms) != 1 or not reductions:
        return None
    mm = mms[0]
    out = mm.outputs[0]
    domain = Domain(tuple(out.shape), (len(out.shape) - 1,))
    n = out.shape[-1]
    why = ""
    group = _group_domain(Domain.of(reductions[0]), out)
    if group is not None and all(Domain.of(r) == group for r in reductions):
        domain = group  # a GroupNorm's groups of a row (kernels/matmul.py's GroupAnchor)
        if n.static and n.coeff & (n.coeff - 1):
            why = f"its groups are reduced in a reshaped tile, and rows of {n.coeff} columns " \
                "are not a power of two"
        elif v.numel != out.numel or any(r.kwargs["kind"] not in ("sum", "amax", "amin")
                                         for r in reductions):
            return None
    for r in reductions:
        if not why and Domain.of(r) != domain:
            shape = "x".join(s.code() for s in r.args[0].shape)
            why = (f"{r.aten} (op {r.index}) reduces dims {list(r.kwargs['dims'])} of a {shape} "
                   "view, not whole rows")
            break
    if not why and not n.static:
        why = f"its rows are {n.code()} long, not known when planning"
    elif not why and n.coeff > ROW_TILE:
        why = f"its rows of {n.coeff} columns exceed one tile ({ROW_TILE})"
    if not why and v.numel not in (out.numel, domain.rows):
        return None
    if why:
        plan.notes[id(mm)] = f"{mm.aten} (op {mm.index}) stores its result for the row " \
            f"reduction: {why}"
        return None
    return Kernel("matmul", [v], mm, domain)


def _group_domain(domain: Domain, out: Value) -> Domain | None:
    """``domain`` when it reduces groups of consecutive columns of the 2-D GEMM result ``out``
    (a [M, groups, size, 1...] view, reduced over its trailing dims), else None."""
    if len(out.shape) != 2 or len(domain.kept) != 2 or domain.kept[0] != out.shape[0]:
        return None
    first = len(domain.shape) - len(domain.dims)
    if domain.dims != tuple(range(first, len(domain.shape))) or first != 2:
        return None
    n, groups, size = out.shape[1], domain.kept[1], domain.cols
    if not (n.static and groups.static and size.static) or groups.coeff * size.coeff != n.coeff:
        return None
    return domain


def _write(kernel: Kernel, plan: Plan) -> None:
    """Write the kernel's bodies (raises Unfusable for what must be stored first)."""
    scalars = {}
    for v in plan.graph.values.values():
        if v.kind == "const" and v.numel == Size(1):
            k = int(v.id[1:])
            scalars[v.id] = plan.graph.trace.constants[k]["values"][0]
    names = dict(plan.names)
    if kernel.kind == "matmul":
        a, b = kernel.anchor.args[0], kernel.anchor.args[1]
        names[a.id], names[b.id] = "a", "b"
    stored = plan.stored - {v.id for v in kernel.outputs}

    def make() -> tuple[KernelWriter, Emitter]:
        w = KernelWriter(names)
        em = Emitter(w, stored, None, scalars)
        em.derived = plan.graph.sizes.derived
        return w, em

    kernel.bodies, kernel.bases, kernel.split = {}, [], None
    if kernel.kind == "library":
        _write_library(kernel, plan)
        return
    if kernel.kind == "scan":
        w, em = make()
        em.anchor = _no_anchor
        write_scan(w, em, kernel.anchor, kernel.outputs[0])
        kernel.bodies["looped"] = w
    elif kernel.kind == "pointwise":
        w, em = make()
        em.anchor = _no_anchor
        write_pointwise(w, em, kernel.outputs)
        kernel.bodies[""] = w
    elif kernel.kind == "matmul":
        a, b = kernel.anchor.args[0], kernel.anchor.args[1]
        kernel.views = (torch_view(a, plan.names, plan.stored, kernel.bases),
                        torch_view(b, plan.names, plan.stored, kernel.bases))
        kernel.to_k_major = to_k_major(kernel.anchor, plan.stored)
        w, em = make()
        w.pointer(kernel.anchor.args[0])
        w.pointer(kernel.anchor.args[1])
        rows = None
        if kernel.domain is not None:
            em.recompute = _same_domain(kernel.domain)
            group = kernel.domain != Domain(tuple(kernel.anchor.outputs[0].shape), (
                len(kernel.anchor.outputs[0].shape) - 1,))
            rows = GroupAnchor(kernel.domain, size=kernel.domain.cols.coeff) if group else \
                ReductionAnchor(kernel.domain)
        write_matmul(w, em, kernel.anchor, kernel.outputs, rows)
        kernel.bodies[""] = w
    else:
        domain = kernel.domain
        w, em = make()
        em.recompute = _same_domain(domain)
        found = ReductionAnchor(domain)
        write_one_pass(w, em, found, kernel.outputs)

        def deps(v: Value) -> set[int]:
            return {id(n) for n in found.order if em.reaches(v, n)}

        def looped(axis: int) -> KernelWriter:
            w2, em2 = make()
            em2.recompute = em.recompute
            write_looped(w2, em2, ReductionAnchor(domain, axis=axis), found, kernel.outputs, deps)
            return w2

        if domain.middle:
            try:  # (what the middle layout cannot index keeps the row layout)
                kernel.bodies["middle"] = looped(0)
            except Unfusable:
                pass
        if not kernel.middle:
            kernel.bodies["fused"] = w
            cols = domain.cols
            if not cols.static or cols.coeff > LOOP_FROM:
                kernel.bodies["looped"] = looped(1)
        # (a middle kernel's programs own BLOCK_B rows each: any number of rows may be few)
        if kernel.middle or kernel.looped and not (domain.rows.static and
                                                   domain.rows.coeff >= SPLIT_BELOW):
            axis = 0 if kernel.middle else 1
            bodies, kernel.split = write_split(make, em.recompute, domain, axis, found,
                                               kernel.outputs, deps)
            kernel.bodies.update(bodies)
    writers = list(kernel.bodies.values())
    kernel.reads = list(dict.fromkeys(v for w in writers for v in w.reads))
    kernel.writes = list(dict.fromkeys(v for w in writers for v in w.writes))
    kernel.symbols = sorted({s for w in writers for s in w.symbols},
                            key=lambda s: (s[0], int(s[1:])))


def _write_library(kernel: Kernel, plan: Plan) -> None:
    """The torch call of a library op on views of stored tensors (an operand computed in a
    kernel is stored first: ``torch_view`` raises Unfusable for it)."""
    node = kernel.anchor
    try:
        args = [torch_view(a, plan.names, plan.stored, kernel.bases) if isinstance(a, Value)
                else _py_arg(a) for a in node.args]
    except ValueError as err:
        raise Unfusable(node, str(err)) from None
    kernel.call = library_call(node, args)
    kernel.views = tuple(args[:3])  # input, weight, bias ("None"): a "conv" kernel's operands
    kernel.reads = list(dict.fromkeys(kernel.bases))
    kernel.writes = [kernel.outputs[0]]
    kernel.symbols = []


def _py_arg(a) -> str:
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_py_arg(x) for x in a) + "]"
    if isinstance(a, Size):
        return a.code()
    if a is None or isinstance(a, (bool, int, float)):
        return repr(a)
    raise ValueError(f"no Python form for {a!r}")


def _same_domain(domain: Domain):
    def prefer(v: Value) -> bool:
        return v.node is not None and v.node.op == "reduce" and Domain.of(v.node) == domain
    return prefer


def _no_anchor(em, node, v, f):
    raise Unfusable(node, "a reduction or matmul in a pointwise kernel")


def _nodes_of(kernel: Kernel, stored: set[str]) -> list[Node]:
    """The nodes the kernel computes (views included), in trace order."""
    seen, out = set(), []
    stack = list(kernel.outputs)
    while stack:
        v = stack.pop()
        if v.node is None or id(v.node) in seen or (v.id in stored and v not in kernel.outputs):
            continue
        seen.add(id(v.node))
        out.append(v.node)
        stack.extend(v.node.tensors())
    return sorted(out, key=lambda n: n.index)


def make_plan(graph: Graph, names: dict[str, str], library: bool = False,
              rows: bool = False) -> Plan | str:
    """The kernels for this graph, or the reason there are none.

    ``rows``: a GEMM whose result's rows fit one tile reduces them in its own kernel (why one
    does not: ``Plan.notes``).

    ``library``: GEMMs too are library calls (cuBLAS on a GPU), their epilogues Triton
    kernels; there is no such plan when nothing would be left to Triton (a lone GEMM or
    convolution: that is the reference's own call, not a kernel). Otherwise GEMMs and
    convolutions are Triton kernels (a convolution stays a library call only where the Triton
    convolution cannot compute it and something else is left to Triton).
    """
    why = uncovered(graph)
    if why:
        return why
    stored = {v.id for v in graph.outputs if not v.leaf}
    ops = LIBRARY_OPS | (MATMUL_OPS if library else set())
    plan = Plan(graph, [], stored, names, frozenset(ops), rows)
    # values something reads (a node's other outputs may be unused: max pooling's indices)
    used = stored | {v.id for n in graph.reachable() for v in n.tensors()}
    for _ in range(4 * len(graph.values) + 8):
        try:
            kernels = _kernels(plan)
        except Unfusable as err:
            new = {v.id for v in err.node.outputs if v.id in used} - plan.stored
            if not new:
                return f"the compiler cannot split {err.node.aten} (op {err.node.index})"
            plan.stored |= new
            continue
        plan.kernels = kernels
        if library and not plan.triton:
            return "nothing is left to Triton: the library call alone is the reference's own"
        for kernel in [] if library else kernels:  # convolutions as Triton kernels of ours
            if kernel.kind != "library":
                continue
            spec = conv_spec(kernel.anchor) if kernel.anchor.op == "convolution" else \
                f"{kernel.anchor.aten} alone"
            if isinstance(spec, str) and not plan.triton:
                return f"no kernel covers {kernel.anchor.aten} ({spec})"
            if not isinstance(spec, str):
                kernel.kind, kernel.conv = "conv", spec
        for k, kernel in enumerate(kernels):
            kernel.name = f"_k{k}_{kernel.anchor.op if kernel.kind == 'library' else kernel.kind}"
            nodes = _nodes_of(kernel, plan.stored)
            kernel.ops = [n.aten for n in nodes if n.op not in VIEW_OPS]
            kernel.products = [n for n in nodes if product_of(n)]
        fused = {id(k.anchor) for k in kernels if k.kind == "matmul" and k.domain is not None}
        plan.notes = {key: note for key, note in plan.notes.items() if key not in fused}
        return plan
    return "the compiler found no way to split this graph"


def _kernels(plan: Plan) -> list[Kernel]:
    graph = plan.graph
    for k, vid in enumerate(sorted(plan.stored, key=lambda i: (graph.values[i].node.index, i))):
        plan.names[vid] = f"buf{k}"
    order = sorted((graph.values[i] for i in plan.stored),
                   key=lambda v: (v.node.index, v.id))
    for v in order:
        if v.leaf:
            continue
        if v.numel == Size(0):
            raise Unfusable(v.node, "an empty tensor")
    kernels = []
    for v in order:
        kernel = _spec(v, plan)
        _write(kernel, plan)
        kernels.append(kernel)
    return _merge(kernels, plan)


def _merge(kernels: list[Kernel], plan: Plan) -> list[Kernel]:
    """Kernels of one kind over one domain merged where no dependency forbids it."""
    writer_of = {v.id: k for k in kernels for v in k.writes}
    deps = {id(k): {id(writer_of[v.id]) for v in k.reads if v.id in writer_of} for k in kernels}
    merged: list[Kernel] = []
    for kernel in kernels:
        target = None
        for pos, other in enumerate(merged):
            if other.key != kernel.key:
                continue
            before = {id(p) for k in merged[:pos] for p in k._parts}
            if deps[id(kernel)] <= before:
                target = other
                break
        if target is None:
            kernel._parts = [kernel]
            merged.append(kernel)
            continue
        target._parts.append(kernel)
        target.outputs = target.outputs + kernel.outputs
        target.domain = target.domain or kernel.domain  # (a matmul that reduces its rows)
        for part in target._parts:
            deps[id(target)] = deps.get(id(target), set()) | deps[id(part)]
    for kernel in merged:
        if len(kernel._parts) > 1:
            _write(kernel, plan)
        del kernel._parts
    return merged
