"""Recording the reference's forward as a graph of aten ops (``records.OpTrace``).

The offline generator's graph templates build kernels from this graph, so each op is kept with
its arguments: tensors as references to inputs, ``state_dict`` entries or earlier ops' outputs,
everything else as JSON. The trace runs on fake tensors whose sizes are symbols (torch's
``FakeTensorMode`` over a ``ShapeEnv``): no data moves, and every size comes out as an
expression of the inputs' sizes, so a kernel written from it follows held-out shapes. Where that
fails (data-dependent control flow), it is retried on fake tensors of fixed sizes, then on the
real tensors. Composite ops are recorded as torch's own decompositions (``torch._decomp``),
which leaves few kinds of ops for the templates to know.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils.weak import WeakIdKeyDictionary

from openkernel.records import OpTrace, StateTensor, TracedOp, TracedTensor

aten = torch.ops.aten

# Composite ops recorded as their decomposition. Each one's decomposition emits aten ops only
# (sum, mean and var_mean are left whole: theirs emit prims.*). Batch norm appears as
# cudnn_batch_norm in a GPU trace, native_batch_norm in a CPU one: both become its arithmetic.
_DECOMPOSED = [
    "_softmax", "_log_softmax", "_safe_softmax", "logsumexp", "native_layer_norm", "native_group_norm",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional", "cudnn_batch_norm", "_batch_norm_with_update",
    "_batch_norm_with_update_functional", "_batch_norm_no_update", "_fused_rms_norm", "nll_loss_forward",
    "nll_loss2d_forward", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "soft_margin_loss",
    "std", "std_mean", "linalg_vector_norm", "norm", "addcmul", "addcdiv", "lerp", "glu",
    "hardshrink", "softshrink", "log_sigmoid_forward", "mv", "addmv", "dot", "baddbmm",
    "celu", "logit",
]
MAX_OPS = 20000  # a longer forward is not a kernel-sized task: the trace stops there
# What made a stored trace: this file's code. The engine keeps a probe's trace beside its
# Inductor captures (same key: task, hardware, software); a change here makes traces anew.
VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
FIXED_SIZES = "sizes are fixed: "  # the note of a trace that could not be symbolic
SMALL_CONSTANT = 64  # tensors built inside forward of up to this many elements keep their values
_SKIPPED = {"prim.device.default", "aten.sym_size.int", "aten.sym_stride.int",
            "aten.sym_numel.default", "aten.sym_storage_offset.default"}


def _table() -> dict:
    from torch._decomp import decomposition_table

    ops = []
    for name in _DECOMPOSED:
        packet = getattr(aten, name, None)
        if packet is not None:
            ops += [getattr(packet, o) for o in packet.overloads()]
    return {op: decomposition_table[op] for op in ops if op in decomposition_table}


def _symbolic(t: torch.Tensor, mode) -> torch.Tensor:
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return mode.from_tensor(t, symbolic_context=context)


def _batched_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """``a @ b`` as at::matmul computes it when either side has batch dims (folded into one mm
    for (..., n, k) @ (k, m), else broadcast, flattened into a bmm and viewed back), written
    with size arithmetic alone; None for the 1-D and 2-D cases. torch 2.11's own matmul
    guards on every size of such operands (KernelBench level3/43 and 50 were traced at fixed
    sizes on the H200), so a trace of attention would not follow held-out shapes."""
    if a.dim() < 2 or b.dim() < 2 or max(a.dim(), b.dim()) < 3:
        return None
    if b.dim() == 2:
        rows = math.prod(a.shape[:-1])
        return a.reshape(rows, a.shape[-1]).mm(b).view(*a.shape[:-1], b.shape[-1])
    batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    n = math.prod(batch)
    a3 = a.expand(*batch, *a.shape[-2:]).reshape(n, *a.shape[-2:])
    b3 = b.expand(*batch, *b.shape[-2:]).reshape(n, *b.shape[-2:])
    return torch.bmm(a3, b3).view(*batch, a.shape[-2], b.shape[-1])


class _SymbolicMatmul(TorchFunctionMode):
    """Routes ``@`` / ``matmul`` with batch dims through :func:`_batched_matmul` in a trace."""

    _OPS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.__rmatmul__ and len(args) == 2 and not kwargs:
            func, args = torch.Tensor.__matmul__, (args[1], args[0])
        if func in self._OPS and len(args) == 2 and not kwargs and all(
                isinstance(t, torch.Tensor) for t in args):
            out = _batched_matmul(*args)
            if out is not None:
                return out
        return func(*args, **kwargs)


class TraceRecorder(TorchDispatchMode):
    """Records each dispatched aten op; see the module docstring."""

    def __init__(self, model: torch.nn.Module, inputs: list) -> None:
        super().__init__()
        self.table = _table()
        self.refs = WeakIdKeyDictionary()  # tensor -> ref, weakly (ids are reused after GC)
        self.storages: dict[int, int] = {}  # id of a tracked tensor's storage -> tensors on it
        self.ops: list[dict] = []
        self.top_ops: list[str] = []
        self.constants: list[dict] = []
        self.depth = 0
        self.truncated = False
        for name, t in model.state_dict(keep_vars=True).items():
            self.refs.setdefault(t, f"s:{name}")
        for name, t in model.named_buffers(remove_duplicate=False):
            self.refs.setdefault(t, f"s:{name}")
        for i, t in enumerate(inputs):
            if isinstance(t, torch.Tensor):
                self.refs[t] = f"in{i}"

    # -- encoding -------------------------------------------------------------------------
    def _ref(self, t: torch.Tensor) -> str:
        ref = self.refs.get(t)
        if ref is not None:
            return ref
        fake = type(t).__name__ == "FakeTensor"
        if not fake and t.numel() <= SMALL_CONSTANT:
            try:
                with _disable_current_modes():  # read the real values, not a fake copy
                    values = t.detach().cpu().reshape(-1).tolist()
            except Exception:  # a meta tensor has none
                return "?"
            self.constants.append({"values": values,
                                   "shape": list(t.shape), "dtype": str(t.dtype)})
            ref = f"c{len(self.constants) - 1}"
            self.refs[t] = ref
            return ref
        return "?"

    def _encode(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return {"t": self._ref(value)}
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return {"sym": value}  # printed once the trace is complete (see _finish)
        if isinstance(value, (list, tuple)):
            return [self._encode(v) for v in value]
        if isinstance(value, dict):
            return {str(k): self._encode(v) for k, v in value.items()}
        if isinstance(value, float) and not math.isfinite(value):
            return {"float": str(value)}
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, torch.dtype):
            return {"dtype": str(value)}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        return {"repr": str(value)}

    # -- dispatch -------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if name in _SKIPPED:
            return func(*args, **kwargs)
        if self.depth == 0:
            self.top_ops.append(name)
        origin = len(self.top_ops) - 1
        decomposition = self.table.get(func)
        if decomposition is None and self.depth > 0 and torch._C._dispatch_has_kernel_for_dispatch_key(
                func.name(), torch._C.DispatchKey.CompositeImplicitAutograd):
            decomposition = func.decompose  # a composite op called by a decomposition
        if decomposition is not None and self.depth < 8:
            self.depth += 1
            try:
                with self:
                    out = decomposition(*args, **kwargs)
            finally:
                self.depth -= 1
            if out is not NotImplemented:
                return out
        note = self._mutation_note(func, args, kwargs)
        out = func(*args, **kwargs)
        if len(self.ops) >= MAX_OPS:
            self.truncated = True
            return out
        tensors = [t for t in _flat(out) if isinstance(t, torch.Tensor)]
        if not tensors and not note:
            note = "returns a Python value, not a tensor (data-dependent)"
        record = {"op": name, "args": self._encode(list(args)), "kwargs": self._encode(kwargs),
                  "outputs": [(list(t.shape), str(t.dtype)) for t in tensors],
                  "origin": origin, "note": note}
        index = len(self.ops)
        self.ops.append(record)
        for j, t in enumerate(tensors):
            self.refs[t] = f"op{index}" if len(tensors) == 1 else f"op{index}.{j}"
        return out

    def _mutation_note(self, func, args, kwargs) -> str:
        schema = func._schema
        if not schema.is_mutable:
            return ""
        values = list(args) + list(kwargs.values())
        for arg, value in zip(schema.arguments, values):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            if not isinstance(value, torch.Tensor):
                continue
            ref = self.refs.get(value, "")
            if ref.startswith(("in", "s:")):
                return "writes into the reference's input or state"
            if value._is_view():
                return "writes through a view"
        return ""

    # -- result -------------------------------------------------------------------------
    def finish(self, outputs: Any, inputs: list, model: torch.nn.Module, namer) -> OpTrace:
        trace = OpTrace(top_ops=self.top_ops, constants=self.constants)
        for record in self.ops:
            trace.ops.append(TracedOp(
                op=record["op"], args=namer.arg(record["args"]), kwargs=namer.arg(record["kwargs"]),
                outputs=[TracedTensor(shape=namer.shape(s), dtype=d) for s, d in record["outputs"]],
                origin=record["origin"], note=record["note"]))
        trace.inputs = [TracedTensor(shape=namer.shape(t.shape), dtype=str(t.dtype))
                        if isinstance(t, torch.Tensor) else None for t in inputs]
        persistent = set(model.state_dict().keys())
        for name, t in model.state_dict(keep_vars=True).items():
            trace.state.append(StateTensor(
                name=name, shape=list(t.shape), dtype=str(t.dtype),
                kind="parameter" if isinstance(t, torch.nn.Parameter) else "buffer"))
        for name, t in model.named_buffers(remove_duplicate=False):
            if name not in persistent:
                trace.state.append(StateTensor(name=name, shape=list(t.shape), dtype=str(t.dtype),
                                               kind="buffer", persistent=False))
        trace.output_kind = ("tensor" if isinstance(outputs, torch.Tensor) else
                             "list" if isinstance(outputs, list) else "tuple")
        trace.outputs = [self._ref(t) if isinstance(t, torch.Tensor) else "?"
                         for t in _flat(outputs)]
        if self.truncated:
            trace.note = f"the trace stopped after {MAX_OPS} ops"
        return trace


def _flat(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [value]


class _SizeNamer:
    """Prints symbolic sizes as Python over s0, s1, ... (named by the input dim they first are)."""

    def __init__(self, env, fake_inputs: list) -> None:
        import sympy
        from torch.utils._sympy.printers import PythonPrinter

        self.env, self.printer = env, PythonPrinter()
        self.rename: dict = {}
        self.sizes: dict[str, list[int]] = {}
        for i, t in enumerate(fake_inputs):
            if not isinstance(t, torch.Tensor):
                continue
            for d, size in enumerate(t.shape):
                if not isinstance(size, torch.SymInt):
                    continue
                expr = self.env.replace(size.node.expr)
                if isinstance(expr, sympy.Symbol) and expr not in self.rename:
                    name = f"s{len(self.rename)}"
                    self.rename[expr] = sympy.Symbol(name, integer=True, positive=True)
                    self.sizes[name] = [i, d]

    def arg(self, value: Any) -> Any:
        """An encoded argument with its symbolic sizes printed: ``{"sym": "s0*4"}`` or an int."""
        if isinstance(value, list):
            return [self.arg(v) for v in value]
        if isinstance(value, dict):
            if set(value) == {"sym"}:
                size = self.size(value["sym"])
                return size if isinstance(size, (int, float)) else {"sym": size}
            return {k: self.arg(v) for k, v in value.items()}
        return value

    def shape(self, sizes) -> list:
        return [self.size(s) for s in sizes]

    def size(self, sym) -> Any:
        if not isinstance(sym, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return sym
        expr = self.env.simplify(self.env.replace(sym.node.expr))
        if expr.is_number:
            return int(expr) if expr.is_integer else float(expr)
        unknown = expr.free_symbols - set(self.rename)
        if unknown:
            raise ValueError(f"a size depends on data ({sorted(map(str, unknown))})")
        return self.printer.doprint(expr.xreplace(self.rename))


class _Concrete:
    """Sizes as plain ints (a trace on tensors of fixed sizes)."""

    def arg(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.arg(v) for v in value]
        if isinstance(value, dict):
            if set(value) == {"sym"}:
                return int(value["sym"])
            return {k: self.arg(v) for k, v in value.items()}
        return value

    def shape(self, sizes) -> list:
        return [int(s) for s in sizes]


def _run(model, inputs: list, fake: str) -> OpTrace:
    """One trace: ``fake`` is "symbolic", "static" or "" (the real tensors)."""
    if not fake:
        recorder = TraceRecorder(model, inputs)
        with torch.no_grad(), recorder:
            out = model(*inputs)
        return recorder.finish(out, inputs, model, _Concrete())
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    # duck_shape=False: equal sizes of unrelated dims stay separate symbols; the guards the
    # forward adds (a matmul's inner sizes, a parameter's length) then tie them.
    env = ShapeEnv(duck_shape=False) if fake == "symbolic" else None
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    fakes = [(_symbolic(t, mode) if env is not None else mode.from_tensor(t))
             if isinstance(t, torch.Tensor) else t for t in inputs]
    recorder = TraceRecorder(model, fakes)
    with torch.no_grad(), mode, recorder, _SymbolicMatmul():
        out = model(*fakes)
    namer = _SizeNamer(env, fakes) if env is not None else _Concrete()
    trace = recorder.finish(out, fakes, model, namer)
    if env is not None and (namer.sizes or not any(
            isinstance(t, torch.Tensor) and t.dim() for t in fakes)):
        trace.symbolic, trace.sizes = True, namer.sizes
    elif env is not None:  # it ran, but a guard in the forward fixed every input size
        trace.note = "; ".join(filter(None, [
            trace.note, FIXED_SIZES + "the forward's guards fixed every input size"]))
    return trace


def stored_trace(kept: Any) -> tuple[bool, OpTrace | None]:
    """(found, trace) from a record ``kept`` (``{"version", "trace"}``, as ``keepable`` makes
    it): found only when this code made it; its trace None when no way worked then."""
    if not isinstance(kept, dict) or kept.get("version") != VERSION:
        return False, None
    try:
        return True, OpTrace.from_json(kept["trace"]) if kept.get("trace") else None
    except Exception:  # a record this code cannot read: traced again
        return False, None


def keepable(trace: OpTrace | None) -> dict:
    from dataclasses import asdict

    return {"version": VERSION, "trace": asdict(trace) if trace is not None else None}


def trace_forward(model: torch.nn.Module, inputs: list) -> OpTrace | None:
    """The forward's op graph, as symbolic as it can be had; None when no way works."""
    why = []
    for fake in ("symbolic", "static", ""):
        try:
            trace = _run(model, inputs, fake)
        except Exception as err:  # the next, plainer way may still work
            why.append(f"{fake or 'real'}: {type(err).__name__}: {str(err)[:200]}")
            continue
        if why:
            trace.note = "; ".join(filter(None, [trace.note, FIXED_SIZES + why[0]]))
        return trace
    return None
