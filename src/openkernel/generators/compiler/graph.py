"""The probe's trace (``records.OpTrace``) as a graph: values, the nodes that make them, sizes.

Each value is a leaf (a forward input, a ``state_dict`` entry, a small constant) or the output
of a node. Nodes keep the op's base name (``add`` for ``aten.add_.Tensor``: in-place ops on
intermediates are their functional twin) and decoded arguments (tensors as :class:`Value`,
sizes as :class:`Size`). A few ops are rewritten into the primitive ones the kernels know:
``addmm`` into ``mm`` and an add, ``mean``/``var_mean`` into sums, ``max.dim`` into ``amax`` and
``argmax``. Every reduction becomes one ``reduce`` node (kind, dims, keepdim).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openkernel.generators.compiler.sizes import ONE, Size, SizeTable, numel
from openkernel.records import OpTrace

# Ops that only re-index their input: no data of their own (the kernels fold them into indices).
VIEW_OPS = {"view", "_unsafe_view", "reshape", "expand", "permute", "t", "transpose", "unsqueeze",
            "squeeze", "alias", "detach", "clone", "contiguous", "lift_fresh", "lift_fresh_copy",
            "real", "flatten", "slice", "select", "as_strided", "unbind", "split", "split_with_sizes",
            "view_as", "expand_as", "numpy_T", "unfold_copy", "flip"}
MATMUL_OPS = {"mm", "bmm"}
REDUCE_KINDS = {"sum", "amax", "amin", "argmax", "argmin", "all", "any", "prod"}


def int_list(value, n: int, default: list[int] | None = None) -> list[int]:
    """An int-or-list argument as ``n`` ints (``[2]`` and ``2`` mean ``[2] * n``); None or an
    empty list gives ``default`` (zeros without one), as torch's pooling and convolution do."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return list(default) if default is not None else [0] * n
    values = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    return values * n if len(values) == 1 else values


@dataclass(frozen=True)
class DType:
    """A dtype argument: ``float32``."""

    name: str


@dataclass(frozen=True)
class Unknown:
    """An argument the trace could not encode (its text)."""

    text: str


@dataclass(frozen=True)
class Opaque:
    """A non-tensor argument kept as text (a device, a memory format): used by no expression."""

    text: str


@dataclass(frozen=True)
class ScalarCode:
    """A scalar computed from sizes inside a kernel, e.g. ``(s1*64 - 1)``."""

    code: str


@dataclass(eq=False)
class Value:
    """One tensor of the graph."""

    id: str  # the trace's reference: "in0", "s:fc.weight", "c0", "op3", "op3.1"
    shape: tuple[Size, ...]
    dtype: str  # "float32", "int64", "bool", ...
    kind: str  # "input", "state", "const", "op"
    node: "Node | None" = None
    index: int = 0  # which output of its node

    @property
    def numel(self) -> Size:
        return numel(self.shape)

    @property
    def leaf(self) -> bool:
        return self.node is None

    def __repr__(self) -> str:
        return f"Value({self.id}, {[s.code() for s in self.shape]}, {self.dtype})"


@dataclass(eq=False)
class Node:
    """One op: base name, decoded arguments, outputs, and where the trace has it."""

    op: str  # base name: "add", "view", "reduce", "mm", ...
    args: list
    kwargs: dict
    outputs: list[Value]
    index: int  # position in OpTrace.ops
    origin: int  # index into OpTrace.top_ops
    aten: str  # the traced op, e.g. "aten.add.Tensor"
    overload: str = ""
    note: str = ""

    def arg(self, pos: int, key: str, default=None):
        """An argument given by keyword or by position (``default`` when not given)."""
        if key in self.kwargs:
            return self.kwargs[key]
        return self.args[pos] if len(self.args) > pos else default

    def tensors(self) -> list[Value]:
        """Tensor arguments, in order (lists flattened)."""
        out = []

        def walk(a):
            if isinstance(a, Value):
                out.append(a)
            elif isinstance(a, (list, tuple)):
                for x in a:
                    walk(x)

        walk(self.args)
        walk(list(self.kwargs.values()))
        return out

    def __repr__(self) -> str:
        return f"Node({self.op}#{self.index})"


def dtype_of(text: str) -> str:
    return text.replace("torch.", "")


def split_op(op: str) -> tuple[str, str]:
    """``aten.add_.Tensor`` -> ("add_", "Tensor")."""
    parts = op.split(".")
    if len(parts) >= 2 and parts[0] in ("aten", "prims"):
        return parts[1], parts[2] if len(parts) > 2 else "default"
    return op, ""


@dataclass
class Graph:
    trace: OpTrace
    sizes: SizeTable
    values: dict[str, Value] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[Value | None] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the graph itself is unusable

    def consumers(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {}
        for node in self.nodes:
            for v in node.tensors():
                out.setdefault(id(v), []).append(node)
        return out

    def reachable(self) -> list[Node]:
        """Nodes the outputs depend on, in trace order."""
        seen: set[int] = set()
        stack = [v for v in self.outputs]
        while stack:
            v = stack.pop()
            if v.node is None or id(v.node) in seen:
                continue
            seen.add(id(v.node))
            stack.extend(v.node.tensors())
        return [n for n in self.nodes if id(n) in seen]


def build_graph(trace: OpTrace) -> Graph:
    """Decode the trace; ``Graph.problems`` says what makes it unusable (if anything)."""
    g = Graph(trace=trace, sizes=SizeTable())
    for i, t in enumerate(trace.inputs):
        if t is None:  # a Python value: the trace has it wherever it was used
            g.inputs.append(None)
            continue
        v = Value(f"in{i}", g.sizes.shape(t.shape), dtype_of(t.dtype), "input")
        g.values[v.id] = v
        g.inputs.append(v)
    for s in trace.state:
        g.values[f"s:{s.name}"] = Value(f"s:{s.name}", g.sizes.shape(s.shape), dtype_of(s.dtype),
                                        "state" if s.persistent else "lost")
    for k, c in enumerate(trace.constants):
        g.values[f"c{k}"] = Value(f"c{k}", g.sizes.shape(c["shape"]), dtype_of(c["dtype"]), "const")
    for index, op in enumerate(trace.ops):
        name, overload = split_op(op.op)
        outputs = []
        for j, out in enumerate(op.outputs):
            vid = f"op{index}" if len(op.outputs) == 1 else f"op{index}.{j}"
            outputs.append(Value(vid, g.sizes.shape(out.shape), dtype_of(out.dtype), "op", index=j))
        kwargs = {k: _decode(v, g) for k, v in op.kwargs.items()}  # its keys are names, not tags
        node = Node(name, _decode(op.args, g), kwargs, outputs, index, op.origin,
                    op.op, overload, op.note)
        for v in outputs:
            v.node = node
            g.values[v.id] = v
        g.nodes.extend(_rewrite(node, g))
    for ref in trace.outputs:
        v = g.values.get(ref)
        if v is None:
            g.problems.append("forward returns something other than tensors it computed")
        elif v not in g.outputs:
            g.outputs.append(v)
    if trace.note.startswith("the trace stopped"):
        g.problems.append(trace.note)
    return g


def _decode(value, g: Graph):
    if isinstance(value, list):
        return [_decode(v, g) for v in value]
    if isinstance(value, dict):
        if set(value) == {"t"}:
            ref = value["t"]
            return g.values.get(ref) or Unknown(f"tensor {ref}")
        if set(value) == {"sym"}:
            return g.sizes.parse(value["sym"])
        if set(value) == {"dtype"}:
            return DType(dtype_of(value["dtype"]))
        if set(value) == {"float"}:
            return float(value["float"])
        if set(value) == {"device"}:
            return Opaque("device " + value["device"])
        if set(value) == {"repr"}:
            return Opaque(value["repr"])
        return {k: _decode(v, g) for k, v in value.items()}
    return value


# --- rewrites into primitive nodes ----------------------------------------------------------
def _norm_dims(dims, ndim: int) -> tuple[int, ...]:
    if dims is None or dims == []:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({d % ndim if ndim else 0 for d in dims}))


def _new(g: Graph, node: Node, op: str, args: list, kwargs: dict, shape, dtype: str,
         out: Value | None = None) -> Node:
    """A primitive node standing in for part of ``node``; ``out`` keeps a traced value's id."""
    if out is None:
        out = Value(f"op{node.index}~{len(g.values)}", tuple(shape), dtype, "op")
        g.values[out.id] = out
    new = Node(op, args, kwargs, [out], node.index, node.origin, node.aten, node.overload)
    out.node, out.index = new, 0
    return new


def _reduce(g, node, x: Value, kind: str, dims, keepdim: bool, dtype: str, out=None) -> Node:
    shape = [ONE if d in dims else s for d, s in enumerate(x.shape)]
    if not keepdim:
        shape = [s for d, s in enumerate(x.shape) if d not in dims]
    return _new(g, node, "reduce", [x], {"kind": kind, "dims": dims, "keepdim": keepdim},
                shape, dtype, out)


def _rewrite(node: Node, g: Graph) -> list[Node]:
    """Primitive nodes for one traced node (usually itself, base name normalised)."""
    op = node.op
    if op.endswith("_") and not op.startswith("_") and op not in ("copy_", "fill_", "zero_"):
        node.op = op = op[:-1]  # in-place on an intermediate: the functional op
    if op in ("copy_", "fill_", "zero_"):
        node.op = op = op[:-1]
    args = node.args
    x = args[0] if args and isinstance(args[0], Value) else None
    kw = node.kwargs
    if op == "addmm" and len(node.outputs) == 1 and x is not None:
        bias, a, b = args[:3]
        beta, alpha = kw.get("beta", args[3] if len(args) > 3 else 1), kw.get(
            "alpha", args[4] if len(args) > 4 else 1)
        out = node.outputs[0]
        mm = _new(g, node, "mm", [a, b], {}, out.shape, out.dtype)
        nodes, acc = [mm], mm.outputs[0]
        if alpha != 1:
            nodes.append(_new(g, node, "mul", [acc, alpha], {}, out.shape, out.dtype))
            acc = nodes[-1].outputs[0]
        if beta != 1:
            nodes.append(_new(g, node, "mul", [bias, beta], {}, bias.shape, bias.dtype))
            bias = nodes[-1].outputs[0]
        nodes.append(_new(g, node, "add", [acc, bias], {}, out.shape, out.dtype, out))
        return nodes
    if op in ("sum", "mean", "amax", "amin", "prod", "all", "any") and x is not None:
        ndim = len(x.shape)
        dims = kw.get("dim", args[1] if len(args) > 1 else None)
        keepdim = kw.get("keepdim", args[2] if len(args) > 2 else False)
        if node.overload == "default" and op in ("sum", "mean", "prod", "all", "any"):
            dims, keepdim = None, False
        dims = _norm_dims(dims, ndim)
        out = node.outputs[0]
        if op != "mean":
            return [_reduce(g, node, x, op, dims, bool(keepdim), out.dtype, out)]
        total = _reduce(g, node, x, "sum", dims, bool(keepdim), out.dtype)
        count = numel([x.shape[d] for d in dims])
        return [total, _new(g, node, "div", [total.outputs[0], count], {}, out.shape, out.dtype,
                            out)]
    if op in ("max", "min") and x is not None and (len(args) > 1 and isinstance(args[1], int)
                                                   or "dim" in kw):
        dim = kw.get("dim", args[1] if len(args) > 1 else 0)
        keepdim = bool(kw.get("keepdim", args[2] if len(args) > 2 else False))
        dims = _norm_dims(dim, len(x.shape))
        values, indices = node.outputs
        return [_reduce(g, node, x, "a" + op, dims, keepdim, values.dtype, values),
                _reduce(g, node, x, "arg" + op, dims, keepdim, indices.dtype, indices)]
    if op in ("max", "min") and x is not None and len(args) == 1 and len(node.outputs) == 1 \
            and node.overload == "default":
        return [_reduce(g, node, x, "a" + op, _norm_dims(None, len(x.shape)), False,
                        node.outputs[0].dtype, node.outputs[0])]
    if op in ("argmax", "argmin") and x is not None:
        dim = kw.get("dim", args[1] if len(args) > 1 else None)
        keepdim = bool(kw.get("keepdim", args[2] if len(args) > 2 else False))
        if dim is None and keepdim:
            return [node]  # a flattened argmax kept at full rank: rare, left to refuse
        return [_reduce(g, node, x, op, _norm_dims(dim, len(x.shape)), keepdim,
                        node.outputs[0].dtype, node.outputs[0])]
    if op in ("var_mean", "var") and x is not None:
        return _var(node, g, x)
    return [node]


def _var(node: Node, g: Graph, x: Value) -> list[Node]:
    """var(x) = sum((x - mean)^2) / (n - correction): two sums over the same rows."""
    args, kw = node.args, node.kwargs
    dims = kw.get("dim", args[1] if len(args) > 1 else None)
    if node.overload in ("correction", "correction_out", "dim", "default", "out"):
        if node.overload == "dim":
            unbiased = kw.get("unbiased", args[2] if len(args) > 2 else True)
            correction = 1 if unbiased else 0
            keepdim = kw.get("keepdim", args[3] if len(args) > 3 else False)
        elif node.overload == "default":
            unbiased = kw.get("unbiased", args[1] if len(args) > 1 else True)
            dims, correction, keepdim = None, 1 if unbiased else 0, False
        else:
            correction = kw.get("correction", args[2] if len(args) > 2 else None)
            correction = 1 if correction is None else correction
            keepdim = kw.get("keepdim", args[3] if len(args) > 3 else False)
    else:
        return [node]
    dims = _norm_dims(dims, len(x.shape))
    count = numel([x.shape[d] for d in dims])
    dt = node.outputs[0].dtype
    kept = [ONE if d in dims else s for d, s in enumerate(x.shape)]
    total = _reduce(g, node, x, "sum", dims, True, dt)
    mean = _new(g, node, "div", [total.outputs[0], count], {}, kept, dt)
    diff = _new(g, node, "sub", [x, mean.outputs[0]], {}, x.shape, dt)
    square = _new(g, node, "mul", [diff.outputs[0], diff.outputs[0]], {}, x.shape, dt)
    ss = _reduce(g, node, square.outputs[0], "sum", dims, True, dt)
    nodes = [total, mean, diff, square, ss]
    var_out = node.outputs[0]
    denominator = ScalarCode(f"({count.code()} - {correction})") if correction else count
    if keepdim:
        nodes.append(_new(g, node, "div", [ss.outputs[0], denominator], {}, kept, dt, var_out))
    else:
        var = _new(g, node, "div", [ss.outputs[0], denominator], {}, kept, dt)
        nodes += [var, _new(g, node, "squeeze", [var.outputs[0], list(dims)], {},
                            var_out.shape, dt, var_out)]
    if len(node.outputs) > 1:
        mean_out = node.outputs[1]
        if keepdim:
            nodes.append(_new(g, node, "alias", [mean.outputs[0]], {}, kept, dt, mean_out))
        else:
            nodes.append(_new(g, node, "squeeze", [mean.outputs[0], list(dims)], {},
                              mean_out.shape, dt, mean_out))
    return nodes
