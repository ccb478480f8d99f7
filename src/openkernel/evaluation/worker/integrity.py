"""Integrity checks: a kernel that cheats is never "faster" (issue 3).

Static checks read the candidate's source and are a first line: a file that defines no kernel
at all, or that falls back to PyTorch in an ``except`` handler, is rejected before it runs.
Dynamic checks decide; they run inside the worker around the candidate's calls:

* ``kernel_launches``: every forward must launch a kernel of its own (Triton launches counted
  by wrapping ``JITFunction.run`` / the interpreter's ``run``, NVRTC launches by wrapping
  ``RawKernel.launch``; on a GPU the profiler's CUDA kernels for CUDA C++, NVRTC kernels
  included: they are driver launches the profiler sees like any other), so a decoy-free
  PyTorch answer is caught; a Triton launch made while a CUDA graph is captured runs at each
  replay of that graph, so it is counted there, on the replaying stream;
* ``torch_compute``: the forward must not run every compute op of the reference in PyTorch
  (recorded with a ``TorchDispatchMode``), so a decoy kernel plus PyTorch math is caught;
* ``patched_functions``: timers, synchronisation, RNG and comparison functions must be the
  very objects captured before the candidate was imported;
* ``background_thread``: no thread may outlive a forward call (nor a process:
  ``background_process``);
* ``lazy_output``: outputs are plain, materialised ``torch.Tensor`` objects;
* the runner adds ``inputs_modified``, ``memoization``, ``reference_memory_reuse``,
  ``precision``, ``held_out_shapes`` and, on a GPU, ``hidden_work`` (profiler kernel time
  versus the timed events) and the roofline flag.

A worker runs candidate code in its own process, so a determined candidate could still reach
into the worker's memory; these checks stop the cheats that generated kernels actually try
(see README, "Evaluation"), and the process boundary plus Landlock keep the engine safe.
"""

from __future__ import annotations

import ast
import contextlib
import builtins
import statistics
import threading
import time
import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from openkernel import syntax
from openkernel.evaluation.worker.correctness import (
    flatten_outputs,
    relative_error,
)
from openkernel.nvrtc import COMPILED, RawKernel


class IntegrityViolation(Exception):
    """A candidate cheated; ``check`` names the check that caught it."""

    def __init__(self, check: str, message: str):
        super().__init__(message)
        self.check = check


# --- static scan ---------------------------------------------------------------------------
_TORCH_ROOTS = {"torch", "F", "nn", "functional"}
_NOT_COMPUTE_CALLS = {"empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full",
                      "full_like", "tensor", "as_tensor", "device", "dtype", "Size", "cdiv",
                      "is_tensor", "numel", "contiguous", "view", "reshape", "warn", "print"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func) + "()"
    return "?"


def _has_kernel(tree: ast.Module, code: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                name = _dotted(dec.func if isinstance(dec, ast.Call) else dec)
                if name.split(".")[-1] in ("jit", "autotune", "heuristics") and (
                        "triton" in name or name in ("jit", "autotune")):
                    return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            return True
    return "load_inline" in code and "__global__" in code


def _fallback_calls(handler: ast.ExceptHandler) -> list[str]:
    """PyTorch compute calls (or the reference Model) inside an except handler."""
    found = []
    for node in ast.walk(handler):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            root, leaf = name.split(".")[0], name.split(".")[-1]
            if name.startswith("super()") and leaf == "forward" or "Model" in name.split("."):
                found.append(name)
            elif root in _TORCH_ROOTS and leaf not in _NOT_COMPUTE_CALLS:
                found.append(name)
    return found


def static_scan(code: str) -> list[tuple[str, str]]:
    """Decisive static findings as (check, message); empty when the source looks honest."""
    try:
        tree = syntax.parse(code)
    except SyntaxError:
        return []  # the build reports syntax errors with their line
    findings = []
    if not _has_kernel(tree, code):
        findings.append(("static_no_kernel", "the candidate defines no custom kernel "
                         "(no @triton.jit function and no CUDA __global__ source)"))
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    calls = _fallback_calls(handler)
                    if calls:
                        findings.append(("static_fallback", f"{fn.name}() falls back to PyTorch "
                                         f"in an except handler ({', '.join(calls[:3])})"))
    return findings


# --- kernel launch counting ----------------------------------------------------------------
class LaunchCounter:
    """Counts kernel launches by wrapping the launchers at class level: Triton's ``run`` and
    NVRTC kernels' ``launch``."""

    def __init__(self) -> None:
        self.count = 0
        self.streams: set[int] = set()  # CUDA streams kernels were launched on (GPU only)
        self.wrapped: list[tuple[type, Callable]] = []
        classes = []
        try:
            from triton.runtime.jit import JITFunction
            classes.append(JITFunction)
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except Exception:  # no Triton (or an older layout): CUDA C++ candidates only
            pass
        for cls in classes:
            self._wrap(cls)
        self._wrap_raw(RawKernel)
        # CUDA graphs: per graph, the Triton launches and aten ops its capture recorded.
        self.captures: list[tuple[list[int], OpRecorder]] = []
        self.graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._wrap_graphs(torch.cuda.CUDAGraph)

    def _seen(self) -> None:
        if self.captures and torch.cuda.is_current_stream_capturing():
            self.captures[-1][0][0] += 1  # captured, not run: counted at each replay
            return
        self.count += 1
        if torch.cuda.is_initialized():
            self.streams.add(torch.cuda.current_stream().cuda_stream)

    def _wrap(self, cls: type) -> None:
        original = cls.run
        counter = self

        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                counter._seen()
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

        cls.run = run
        self.wrapped.append((cls, "run"))

    def _wrap_raw(self, cls: type) -> None:
        """NVRTC kernels (``openkernel.nvrtc``): every checked launch is a kernel launch."""
        original = cls.launch
        counter = self

        def launch(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            counter._seen()
            return result

        cls.launch = launch
        self.wrapped.append((cls, "launch"))


    def _wrap_graphs(self, cls: type) -> None:
        """A capture records the Triton launches and aten ops made in it; a replay counts those
        launches on the replaying stream and hands the ops to the recorders then active (so a
        replayed graph of PyTorch calls is still PyTorch compute to ``torch_compute``)."""
        begin, end, replay = cls.capture_begin, cls.capture_end, cls.replay
        counter = self

        def capture_begin(graph, *args, **kwargs):
            recorder = OpRecorder(active=False)
            counter.captures.append(([0], recorder))
            recorder.__enter__()
            try:
                return begin(graph, *args, **kwargs)
            except BaseException:
                recorder.__exit__(None, None, None)
                counter.captures.pop()
                raise

        def capture_end(graph, *args, **kwargs):
            try:
                return end(graph, *args, **kwargs)  # (an inner wrapper's recorder exits first)
            finally:
                if counter.captures:
                    (launches,), recorder = counter.captures.pop()
                    recorder.__exit__(None, None, None)
                    counter.graphs[graph] = (launches, recorder.ops)

        def replay_(graph, *args, **kwargs):
            result = replay(graph, *args, **kwargs)
            launches, ops = counter.graphs.get(graph, (0, []))
            if launches:
                counter.count += launches
                counter.streams.add(torch.cuda.current_stream().cuda_stream)
            for recorder in OpRecorder.recording:
                recorder.ops.extend(ops)
            return result

        for name, fn in (("capture_begin", capture_begin), ("capture_end", capture_end),
                         ("replay", replay_)):
            setattr(cls, name, fn)
            self.wrapped.append((cls, name))


# --- aten ops (what counts as compute: openkernel.aten_ops) ------------------------------------
class OpRecorder(TorchDispatchMode):
    """Records the base names of the aten ops dispatched while active; ``recording`` holds the
    active ones that a graph replay's ops are added to (not a capture's own, ``active=False``)."""

    recording: list["OpRecorder"] = []

    def __init__(self, active: bool = True) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.active = active

    def __enter__(self):
        if self.active:
            OpRecorder.recording.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        if self in OpRecorder.recording:
            OpRecorder.recording.remove(self)
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


# --- identity of what the evaluation relies on ---------------------------------------------
_GUARDED = [
    (time, "perf_counter"), (time, "perf_counter_ns"), (time, "monotonic"), (time, "time"),
    (threading, "active_count"), (threading, "enumerate"), (statistics, "median"),
    (torch, "manual_seed"), (torch, "randn"), (torch, "rand"), (torch, "randint"),
    (torch, "randn_like"), (torch, "rand_like"), (torch, "allclose"), (torch, "isnan"),
    (torch, "isinf"), (torch, "equal"), (torch, "abs"), (torch, "where"), (torch.linalg, "vector_norm"),
    (torch.Tensor, "normal_"), (torch.Tensor, "uniform_"), (torch.Tensor, "copy_"),
    (torch.Tensor, "clone"), (torch.Tensor, "to"), (torch.Tensor, "__sub__"),
    (torch.Tensor, "data_ptr"), (torch.cuda, "synchronize"), (torch.cuda, "Event"),
    (torch.cuda.Event, "record"), (torch.cuda.Event, "elapsed_time"),
    (torch.cuda.Event, "synchronize"), (torch.cuda.Stream, "synchronize"),
    (builtins, "float"), (builtins, "len"), (builtins, "max"), (builtins, "sum"),
    (builtins, "isinstance"),
]


class Guard:
    """Snapshot of functions the evaluation trusts; :meth:`changed` lists any replaced."""

    def __init__(self, extra: list[tuple[Any, str]] = ()):
        self.items = [(owner, name, owner.__dict__.get(name, getattr(owner, name, None))
                       if isinstance(owner, type) else getattr(owner, name, None))
                      for owner, name in list(_GUARDED) + list(extra)]

    def changed(self) -> list[str]:
        out = []
        for owner, name, obj in self.items:
            now = owner.__dict__.get(name, getattr(owner, name, None)) if isinstance(
                owner, type) else getattr(owner, name, None)
            if now is not obj:
                label = getattr(owner, "__name__", type(owner).__name__)
                out.append(f"{label}.{name}")
        return out


# --- outputs ---------------------------------------------------------------------------------
def output_problem(outs: list, ref_device: torch.device) -> str | None:
    """Why an output is not a real, materialised tensor on the right device (or None)."""
    for i, t in enumerate(outs):
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            return f"output {i} is a {type(t).__module__}.{type(t).__name__}, not a plain torch.Tensor"
        if t.is_meta or t.layout != torch.strided:
            return f"output {i} is not a materialised dense tensor ({t.layout}, meta={t.is_meta})"
        if t.device.type != ref_device.type:
            return f"output {i} is on {t.device}, the reference's on {ref_device}"
    return None


class KernelProfile:
    """Around one call: the CUDA kernels it launches (``names``) and their summed device time in
    ms (``kernel_ms``), GPU only. A context manager, so that the caller's thread enters it
    around the call there (caller.py), the call's frames the same as any other call's."""

    def __init__(self, sync: Callable[[], None]):
        self.sync = sync
        self.names: list[str] = []
        self.kernel_ms = 0.0

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile

        self.sync()
        self._prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        self._prof.__enter__()
        return self

    def __exit__(self, *exc):
        from torch.autograd import DeviceType

        try:
            self.sync()
        finally:
            self._prof.__exit__(*exc)
        if exc[0] is None:
            total_us = 0.0
            for evt in self._prof.events():
                if evt.device_type == DeviceType.CUDA:
                    self.names.append(evt.name)
                    total_us += getattr(evt, "device_time", None) or getattr(evt, "cuda_time", 0.0)
            self.kernel_ms = total_us / 1e3
        return False


def kernel_profile(fn: Callable[[], Any], sync: Callable[[], None]) -> tuple[list[str], float]:
    """CUDA kernels one call launches (names) and their summed device time in ms (GPU only)."""
    with KernelProfile(sync) as profile:
        fn()
    return profile.names, profile.kernel_ms


def has_children() -> bool:
    """Whether this process has a child, running or exited and not yet waited for (the worker
    is a child subreaper, sandbox.py, so a grandchild whose parent left counts too). A process
    a forward leaves behind can finish its work where no timer looks (``background_process``)."""
    import os

    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


PROFILE_TRIES = 3  # profiled calls at most before work outside the timed stream is called hidden


def hidden_work(profile: Callable[[], tuple[list[str], float]],
                timed_ms: float) -> tuple[list[str], float, list[float]]:
    """The kernels of a profiled call, the least kernel time of up to :data:`PROFILE_TRIES`
    calls, and each call's: another call is profiled only while each so far saw more than the
    ``hidden_work`` bound over the timed median. The profiled call shares the GPU with other
    workers' first calls (they run outside any turn), and a kernel whose context is switched
    out meanwhile counts that time as its own: an inductor seed's 2.72 ms call was profiled at
    5.21 ms on the H200 (kb22-s27-b) and judged incorrect. Work on another stream shows in
    every call."""
    names, tries = [], []
    for _ in range(PROFILE_TRIES):
        seen, kernel_ms = profile()
        names = names or seen
        tries.append(kernel_ms)
        if not beyond_timed(kernel_ms, timed_ms):
            break
    return names, min(tries), tries


def beyond_timed(kernel_ms: float, timed_ms: float) -> bool:
    """Whether a call's kernel time is past what its timed median allows."""
    return kernel_ms > 1.5 * timed_ms + 0.005


_TORCH_KERNEL_PREFIXES = ("void at::", "at::", "void (anonymous namespace)", "void cutlass",
                          "sm90_", "sm80_", "ampere_", "cutlass", "Memcpy", "Memset",
                          "void cublas", "nvjet", "gemm", "void gemv", "cudnn", "triton_")


def custom_kernels(names: list[str]) -> list[str]:
    """The kernels in a profile that PyTorch's own libraries did not launch (an NVRTC kernel
    of this process counts whatever its name, ``gemm_tiled`` included)."""
    own = {k.name.partition("<")[0] for k in COMPILED}
    return [n for n in names if not n.startswith(_TORCH_KERNEL_PREFIXES)
            or _base_name(n) in own]


def _base_name(kernel: str) -> str:
    """``void gemm_tiled<float>(float const*, ...)`` -> ``gemm_tiled``."""
    return kernel.split("(")[0].split("<")[0].split()[-1] if kernel.strip() else kernel


def lowered_dtype(outs: list, ref_outs: list) -> str | None:
    """Why an output's dtype is below the reference's, or None (``precision`` check)."""
    for o, r in zip(outs, ref_outs):
        if o.dtype != r.dtype and o.dtype.is_floating_point and r.dtype.is_floating_point:
            if torch.finfo(o.dtype).bits < torch.finfo(r.dtype).bits or o.dtype == torch.bfloat16:
                return f"output dtype {o.dtype} is below the reference's {r.dtype}"
    return None


def float64_reference(ref_model: torch.nn.Module, inputs: list, host: bool = False) -> list | None:
    """The reference's outputs computed in float64, or None when it has no float64 path.

    Its floating weights and buffers are swapped for float64 ones for the run and restored
    bit for bit after it: the float32 originals wait in host memory meanwhile, so the device
    never holds them, a float32 copy and the float64 weights at once (a deep copy did, 5x the
    weights at its peak: what took the level-2 GEMMs over 3x their footprint). ``host``: the
    run is on the CPU (the device then holds none of the reference's weights during it); the
    outputs are on the CPU too.
    """
    device = torch.device("cpu") if host else None
    with _float64_weights(ref_model, device):
        try:
            ins64 = [t.to(device or t.device, torch.float64 if t.is_floating_point() else t.dtype)
                     if isinstance(t, torch.Tensor) else t for t in inputs]
            with torch.no_grad():
                return flatten_outputs(ref_model(*ins64))
        except Exception:
            return None


@contextlib.contextmanager
def _float64_weights(model: torch.nn.Module, device: torch.device | None):
    """``model``'s floating parameters and buffers in float64 (on ``device``, else where each
    is) while the block runs; the originals parked on the host and put back after it."""
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()}
    parked = []
    try:
        for t in tensors.values():
            home = t.device
            original = t.data.to("cpu", copy=True) if home.type != "cpu" else t.data
            parked.append((t, original, home))
            t.data = torch.empty(0, device=home)  # the device copy freed before the float64 one
            t.data = original.to(device or home, torch.float64)
        yield
    finally:
        for t, original, home in parked:
            t.data = torch.empty(0, device=home)
            t.data = original.to(home)


def rounding_error(exact: torch.Tensor, chunk: int) -> float:
    """The relative error that rounding to a 16-bit type leaves (what lowered precision looks like)."""
    return max(relative_error(exact, exact, chunk, through=lambda b, d=d: b.to(d))
               for d in (torch.float16, torch.bfloat16))


def precision_problem(err_cand: list[float], err_ref: list[float], rounding: list[float],
                      floors: list[float]) -> str | None:
    """Why the candidate's precision is below the task's, or None (``precision`` check).

    Against a float64 run of the reference the candidate's relative error may not exceed 16x
    the reference's own error (nor half the dtype's ``max_rel_error``: ``floors``) *when* that
    excess looks like rounding to a narrower type. A plain wrong answer (a scale, an
    off-by-one) does not look like rounding, and is left to the tolerances.
    """
    for i, (ec, er, rd, floor) in enumerate(zip(err_cand, err_ref, rounding, floors)):
        limit = max(16 * er, floor)
        if limit < ec <= 4 * rd:
            return (f"output {i}: error against a float64 reference {ec:.3g}, the "
                    f"reference's own {er:.3g} (limit {limit:.3g})")
    return None
