"""Probing a task inside a worker: load it, run the reference once, and describe it.

The probe validates the task (one clear message naming the file when something is wrong),
tells the offline generator which aten ops run, gives FLOPs and bytes for roofline estimates,
and warns about references that make correctness checks weak (nearly constant outputs, or
outputs below the absolute tolerance, where an all-zero answer would pass ``atol``).
"""

from __future__ import annotations

import traceback
from dataclasses import asdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from openkernel.evaluation.protocol import Job
from openkernel.evaluation.worker.correctness import (
    dtype_name,
    flatten_outputs,
    tolerances_for,
)
from openkernel.evaluation.worker.hardware import detect
from openkernel.evaluation.worker.integrity import OpRecorder
from openkernel.evaluation.worker.task_runtime import TaskRuntime, clone, tensors_in
from openkernel.records import TaskProbe


def _where(err: BaseException, files: list[str]) -> str:
    """The task file a traceback passes through last (the one to fix)."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename in files:
            return f"{frame.filename}:{frame.lineno}"
    return files[0]


def output_warnings(outs: list[torch.Tensor], tol_hook=None) -> list[str]:
    """Warnings about outputs that make correctness checks weak."""
    warnings = []
    for i, out in enumerate(outs):
        if not out.dtype.is_floating_point or out.numel() == 0:
            continue
        o = out.detach().to(torch.float64)
        if torch.isnan(o).any():
            warnings.append(f"output {i} of the reference contains NaN: those elements cannot be checked")
            continue
        atol = tolerances_for(out.dtype, tol_hook)["atol"]
        peak = float(o.abs().max())
        spread = float(o.max() - o.min())
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


def run_probe(job: Job, ch) -> dict:
    """Worker mode ``probe``: returns {"probe": TaskProbe as a dict}."""
    device = job.device
    files = [p for p in (job.reference_path, job.hooks_path) if p]
    hw = detect()
    try:
        rt = TaskRuntime(job.reference_path, job.hooks_path, device)
        model = rt.make_model(rt.ref.Model)
        inputs = rt.inputs(0)
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
    except Exception as err:
        return {"probe": asdict(TaskProbe(ok=False, hardware=hw, error=(
            f"{_where(err, files)}: the reference's forward failed on get_inputs(): "
            f"{type(err).__name__}: {err}")))}
    warnings = output_warnings(outs, rt.hook("get_tolerances"))
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
    ops = list(dict.fromkeys(rec.ops))
    in_bytes = sum(t.numel() * t.element_size() for t in tensors_in(inputs))
    out_bytes = sum(t.numel() * t.element_size() for t in outs)
    probe = TaskProbe(
        ok=True, aten_ops=ops,
        input_shapes=[list(t.shape) for t in tensors_in(inputs)],
        input_dtypes=[str(t.dtype) for t in tensors_in(inputs)],
        output_shapes=[list(t.shape) for t in outs],
        output_dtypes=[str(t.dtype) for t in outs],
        flops=float(flops_mode.get_total_flops() + pointwise.flops),
        bytes_moved=float(in_bytes + out_bytes),
        warnings=warnings, hardware=hw,
        log=f"device {device}; held-out inputs: {len(extra)} set(s), {source}; "
            f"output dtypes {', '.join(dtype_name(t.dtype) for t in outs)}",
    )
    return {"probe": asdict(probe)}
