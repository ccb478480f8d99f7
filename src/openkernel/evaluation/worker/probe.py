"""Probing a task inside a worker: load it, run the reference once, and describe it.

The probe validates the task (one clear message naming the file when something is wrong),
tells the offline generator which aten ops run and records the forward's graph of aten ops
(``trace.py``, for the graph templates), gives FLOPs and bytes for roofline estimates,
warns about references that make correctness checks weak (nearly constant outputs, or
outputs below the absolute tolerance, where an all-zero answer would pass ``atol``), and
measures the reference's memory footprint (``records.Footprint``), from which the engine plans
every evaluation's use of device memory.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from openkernel.evaluation.protocol import Job
from openkernel.evaluation.worker.correctness import (
    Fingerprints,
    blocks,
    dtype_name,
    flatten_outputs,
    tolerances_for,
)
from openkernel.evaluation.worker.hardware import detect
from openkernel.evaluation.worker.inductor import CAPTURES_FORMAT, capture_signatures, shapes_only
from openkernel.evaluation.worker import precision
from openkernel.aten_ops import compute_ops
from openkernel.evaluation.worker.integrity import OpRecorder
from openkernel.evaluation.worker.task_runtime import TaskRuntime, clone, tensors_in
from openkernel.evaluation.worker.trace import FIXED_SIZES, keepable, stored_trace, trace_forward
from openkernel.records import Footprint, TaskProbe


def _where(err: BaseException, files: list[str]) -> str:
    """The task file a traceback passes through last (the one to fix)."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename in files:
            return f"{frame.filename}:{frame.lineno}"
    return files[0]


def _value_stats(t: torch.Tensor) -> tuple[bool, float, float, float]:
    """(has NaN, max |t|, min, max) in float64, in blocks (no full-size copy)."""
    nan, peak, lo, hi = False, 0.0, float("inf"), float("-inf")
    for idx in blocks(tuple(t.shape)):
        b = t[idx].detach().to(torch.float64)
        if b.numel() == 0:
            continue
        nan = nan or bool(torch.isnan(b).any())
        peak, lo, hi = max(peak, float(b.abs().max())), min(lo, float(b.min())), max(hi, float(b.max()))
    return nan, peak, lo, hi


def output_warnings(outs: list[torch.Tensor], tol_hook=None) -> list[str]:
    """Warnings about outputs that make correctness checks weak."""
    warnings = []
    for i, out in enumerate(outs):
        if not out.dtype.is_floating_point or out.numel() == 0:
            continue
        has_nan, peak, lo, hi = _value_stats(out)
        if has_nan:
            warnings.append(f"output {i} of the reference contains NaN: those elements cannot be checked")
            continue
        atol = tolerances_for(out.dtype, tol_hook)["atol"]
        spread = hi - lo
        if peak < atol:
            warnings.append(f"output {i} is below the absolute tolerance (max |out| = {peak:.3g} "
                            f"< atol {atol:g}): an all-zero answer passes atol, so the relative "
                            "error ||out-ref||/||ref|| decides")
        elif spread <= 1e-6 * max(peak, 1e-30) or spread < atol / 10:
            warnings.append(f"output {i} is nearly constant (spread {spread:.3g}): "
                            "correctness checks on it say little")
    return warnings


# Pointwise ops that move data without arithmetic.
_NO_ARITHMETIC = {"clone", "_to_copy", "copy", "copy_", "fill", "fill_", "zero_", "detach",
                  "alias", "lift_fresh", "empty_like", "zeros_like", "ones_like", "full_like"}
_SOFTMAX = {"_softmax", "_log_softmax", "softmax", "log_softmax"}  # max, sub, exp, sum, div


class PointwiseFlops(TorchDispatchMode):
    """The work torch's FlopCounterMode leaves out (it counts matmuls and convolutions only):
    one FLOP per output element of each pointwise op (``torch.Tag.pointwise``), one per input
    element of each reduction, five per element of a softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name in _NO_ARITHMETIC:
            return out
        tags = getattr(func, "tags", ())
        if torch.Tag.pointwise in tags:
            self.flops += sum(t.numel() for t in tensors_in([out]))
        elif torch.Tag.reduction in tags or name in _SOFTMAX:
            first = next(iter(tensors_in(list(args))), None)
            if first is not None:
                self.flops += first.numel() * (5 if name in _SOFTMAX else 1)
        return out


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_in(tensors))


def _peak_forward(model, inputs, gpu: bool) -> tuple[int, list]:
    """(peak bytes allocated during one forward, with weights and inputs resident; outputs)."""
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        outs = flatten_outputs(model(*inputs))
    if gpu:
        torch.cuda.synchronize()
        return int(torch.cuda.max_memory_allocated()), outs
    return 0, outs


SMALL_SET_FROM = 64 << 20  # inputs above this get a smaller set for the float64 check
# So does a problem whose data besides its weights (outputs, intermediates) passes this: a
# sweep screens on the smaller set, so its combinations' first calls (each compiling its
# kernels) fit side by side (level1/54, a 3-d convolution of 50 MB in and 1 GB out, compiled
# its six one after another on the H200: 10-25 s a candidate). Not for weights: a GEMM's
# tiles are chosen for its rows, which a smaller batch would change.
SMALL_DATA_FROM = 256 << 20


def _footprint(rt: TaskRuntime, model, inputs, extra: list, gpu: bool) -> Footprint:
    """What the reference holds on its device; the inputs stay as they were."""
    params = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    before = Fingerprints(rt.device, seed=0)
    marks = before.of_all(tensors_in(inputs))
    peak, outs = _peak_forward(model, inputs, gpu)
    fp = Footprint(param_bytes=params, input_bytes=_nbytes(inputs), output_bytes=_nbytes(outs),
                   measured=gpu)
    fp.mutates_inputs = before.of_all(tensors_in(inputs)) != marks
    fp.peak_bytes = peak or (params + fp.input_bytes + fp.output_bytes)
    del outs
    if fp.input_bytes > SMALL_SET_FROM or fp.peak_bytes - params > SMALL_DATA_FROM:
        target = fp.input_bytes // 4
        sizes = extra_index = None
        if rt.hook("get_extra_inputs"):
            small = [(k, _nbytes(s)) for k, s in enumerate(extra) if _nbytes(s) <= target]
            extra_index = min(small, key=lambda kv: kv[1])[0] if small else None
        elif not rt.hook("get_inputs"):
            sizes = rt.small_sizes(model, target)
        if sizes or extra_index is not None:
            fp.small_set = {"sizes": sizes} if sizes else {"extra": extra_index}
            small_inputs = rt.sized_inputs(0, sizes) if sizes else extra[extra_index]
            if gpu:
                torch.cuda.empty_cache()
                base = int(torch.cuda.memory_allocated()) - _nbytes(small_inputs)
                peak, outs = _peak_forward(model, small_inputs, gpu)
                fp.small_peak_bytes = max(peak - base, 0) + params  # as if alone on the device
                del outs
            else:
                fp.small_peak_bytes = params + _nbytes(small_inputs)
            del small_inputs
    return fp


def run_probe(job: Job, ch) -> dict:
    """Worker mode ``probe``: returns {"probe": TaskProbe as a dict}, and ``"captured"``
    (Inductor's captures and their warnings, for the store) when it made them; with
    ``job.inductor`` (captures kept in the store, of this format) it uses those instead."""
    device = job.device
    gpu = device.startswith("cuda")
    files = [p for p in (job.reference_path, job.hooks_path) if p]
    steps: dict[str, float] = {}  # each step's seconds: where a probe's fixed cost goes
    mark = [time.monotonic()]

    def step(name: str) -> None:
        now = time.monotonic()
        steps[name] = round(steps.get(name, 0.0) + now - mark[0], 3)
        mark[0] = now

    hw = detect()
    step("hardware")
    try:
        rt = TaskRuntime(job.reference_path, job.hooks_path, device)
        model = rt.reference_model()
        inputs = rt.inputs(0)
        step("load")
    except Exception as err:
        return {"probe": asdict(TaskProbe(ok=False, hardware=hw, error=(
            f"{_where(err, files)}: loading the task failed: {type(err).__name__}: {err}")))}
    if not tensors_in(inputs):
        return {"probe": asdict(TaskProbe(ok=False, hardware=hw, error=(
            f"{files[-1] if rt.hook('get_inputs') else files[0]}: get_inputs returned no tensors")))}
    try:
        from torch.utils.flop_counter import FlopCounterMode

        flops_mode = FlopCounterMode(display=False)
        args = clone(inputs)
        with torch.no_grad(), flops_mode, OpRecorder() as rec, PointwiseFlops() as pointwise:
            out = model(*args)
        outs = flatten_outputs(out)
        del args, out
    except Exception as err:
        return {"probe": asdict(TaskProbe(ok=False, hardware=hw, error=(
            f"{_where(err, files)}: the reference's forward failed on get_inputs(): "
            f"{type(err).__name__}: {err}")))}
    step("forward")
    warnings = output_warnings(outs, rt.hook("get_tolerances"))
    output_shapes = [list(t.shape) for t in outs]
    output_dtypes = [str(t.dtype) for t in outs]
    out_bytes = _nbytes(outs)
    del outs
    for i, t in enumerate(tensors_in(inputs)):
        if t.is_floating_point() and t.numel() and not bool(t.ne(0).any()):
            warnings.append(f"input {i} is all zeros: correctness on it proves little")
    try:
        extra, source = rt.extra_inputs(1, model)
        with torch.no_grad():
            for s in extra:
                model(*clone(s))
    except Exception as err:
        return {"probe": asdict(TaskProbe(ok=False, hardware=hw, error=(
            f"{_where(err, files)}: held-out inputs (get_extra_inputs) failed: "
            f"{type(err).__name__}: {err}")))}
    step("heldout")
    heldout = [{"name": source if len(extra) == 1 and not rt.hook("get_extra_inputs")
                else f"get_extra_inputs set {i}",
                "shapes": [list(t.shape) for t in tensors_in(s)],
                "dtypes": [dtype_name(t.dtype) for t in tensors_in(s)]} for i, s in enumerate(extra)]
    held_shapes = [shapes_only(s) for s in extra] if gpu else []  # Inductor's, per signature
    if not rt.hook("get_extra_inputs"):
        extra = []  # derived sets are remade per evaluation: none is needed for the footprint
    try:
        footprint = _footprint(rt, model, inputs, extra, gpu)
    except Exception as err:  # our own measurement failed: say so, plan without it
        footprint = None
        warnings.append(f"measuring the reference's memory footprint failed ({type(err).__name__}: "
                        f"{err}); evaluations plan for the inputs and outputs alone")
    ops = list(dict.fromkeys(rec.ops))
    step("footprint")
    seeds = captured = None
    stored = job.inductor if (job.inductor or {}).get("format") == CAPTURES_FORMAT else None
    # The trace is kept with the captures: 1.4-2.0 s of a probe's 2-3 s on the H200 once the
    # baselines and captures come from the store (kb22-s25-b0-stored).
    reused, trace = stored_trace((stored or {}).get("trace"))
    if not reused:
        try:
            trace = trace_forward(model, inputs)
        except Exception:  # the graph is for the offline templates: a task without it still runs
            trace = None
    if trace is not None and FIXED_SIZES in trace.note:
        # the compiler then writes kernels for these sizes alone: held-out sizes will fail them
        warnings.append(f"the reference's trace has fixed sizes ({trace.note}); the offline "
                        "kernels hold only at the benchmark's sizes")
    step("trace")
    failed: list[str] = []
    if stored is not None:  # made by an earlier probe of this task, hardware and software
        seeds, failed = stored.get("captures") or [], list(stored.get("warnings") or [])
        if not reused:  # a record from before traces were kept, or another trace.py's
            captured = {**stored, "trace": keepable(trace)}
    elif gpu:  # Inductor's own kernels, the offline generator's seed (nothing runs), once per
        # input signature: its code is specialised to each input's rank and dtype; and once
        # at the benchmark inputs' own sizes, as torch.compile's default specialises on them
        seeds, failed = capture_signatures(model, [inputs, *held_shapes])
    if stored is None:  # on the CPU no captures, but the trace is kept all the same
        captured = {"format": CAPTURES_FORMAT, "captures": seeds or [], "warnings": failed,
                    "trace": keepable(trace)}
    warnings += failed
    seeds = seeds or None
    if gpu or seeds:
        step("inductor")
    in_bytes = _nbytes(inputs)
    tol_hook = rt.hook("get_tolerances")
    tolerances = {d.removeprefix("torch."): tolerances_for(getattr(torch, d.removeprefix("torch.")),
                                                           tol_hook)
                  for d in dict.fromkeys(output_dtypes)}
    reference_ms = _time_reference(model, inputs, gpu)
    step("timing")
    try:
        conv_exact = gpu and precision.conv_exact(lambda: _forward(model, inputs), compute_ops(ops))
    except Exception as err:  # our own measurement failed: TF32 stays as the flags allow
        conv_exact = False
        warnings.append(f"measuring the reference's convolution precision failed "
                        f"({type(err).__name__}: {err})")
    step("precision")
    probe = TaskProbe(
        ok=True, aten_ops=ops,
        input_shapes=[list(t.shape) for t in tensors_in(inputs)],
        input_dtypes=[str(t.dtype) for t in tensors_in(inputs)],
        output_shapes=output_shapes, output_dtypes=output_dtypes,
        flops=float(flops_mode.get_total_flops() + pointwise.flops),
        bytes_moved=float(in_bytes + out_bytes),
        warnings=warnings, hardware=hw, memory=footprint, trace=trace, tolerances=tolerances,
        heldout=heldout, reference_ms=reference_ms, steps_s=steps,
        flags=precision.current(), library_bound=precision.library_bound(compute_ops(ops)),
        conv_exact=conv_exact,
        inductor=seeds,
        log=(f"device {device}; held-out inputs: {source}; output dtypes "
             f"{', '.join(d.removeprefix('torch.') for d in output_dtypes)}"),
    )
    kept = [what for what, yes in (("the trace", reused),
                                   ("Inductor's code", bool(stored and stored.get("captures")))) if yes]
    if kept:
        probe.log += f"; {' and '.join(kept)} from the store"
    if footprint is not None:
        probe.log += "; " + describe_footprint(footprint)
    return {"probe": asdict(probe), **({"captured": captured} if captured else {})}


def _forward(model, inputs) -> list[torch.Tensor]:
    with torch.no_grad():
        return flatten_outputs(model(*clone(inputs)))


def _time_reference(model, inputs, gpu: bool, calls: int = 3, budget_s: float = 2.0) -> float:
    """The reference's median wall time over a few calls, in ms: a guide for the prompt while
    no candidate has timed it (the interleaved benchmark is what speedups come from)."""
    times = []
    try:
        with torch.no_grad():
            for _ in range(calls):
                args = clone(inputs)
                if gpu:
                    torch.cuda.synchronize()
                start = time.perf_counter()
                model(*args)
                if gpu:
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
                del args
                if sum(times) > budget_s:
                    break
    except Exception:  # noqa: BLE001 - a guide only: no figure rather than a failed probe
        return 0.0
    return sorted(times)[len(times) // 2] * 1e3 if times else 0.0


def describe_footprint(fp: Footprint) -> str:
    gib = 2 ** 30
    text = (f"footprint {fp.peak_bytes / gib:.3g} GiB ({'measured' if fp.measured else 'estimated'}: "
            f"weights {fp.param_bytes / gib:.3g}, inputs {fp.input_bytes / gib:.3g}, outputs "
            f"{fp.output_bytes / gib:.3g} GiB)")
    if fp.mutates_inputs:
        text += "; the reference writes into its inputs"
    if fp.small_set:
        text += f"; small set for the float64 check: {fp.small_set}"
    return text
