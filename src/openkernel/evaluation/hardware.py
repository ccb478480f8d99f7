"""What the candidates run on: detected inside a worker process, never in the engine.

The engine must not initialise CUDA itself (a forked or long-lived engine holding a CUDA
context is fragile, and it must stay importable on machines without torch.cuda), so
:func:`detect` runs in a worker (``python -m openkernel.evaluation.worker --hardware``) and the
engine rebuilds the :class:`Hardware` record from the JSON it prints.

Peak figures start as datasheet values (dense, no sparsity); on a GPU the hardware worker
replaces them with ceilings measured on the device (``ceilings.py``: a large device copy and
large matmuls, cached per device model), which the roofline, the critic and the too-good-to-
be-true flag then use.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from openkernel.evaluation.types import Hardware

CPU_LABEL = "CPU (Triton interpreter)"

# name fragment -> (HBM GB/s, {dtype: TFLOP/s}); dense tensor-core peaks for 16-bit types.
_PEAKS: dict[str, tuple[float, dict[str, float]]] = {
    "H200": (4800.0, {"float32": 67.0, "tf32": 495.0, "float16": 990.0, "bfloat16": 990.0}),
    "H100": (3350.0, {"float32": 67.0, "tf32": 495.0, "float16": 990.0, "bfloat16": 990.0}),
    "A100": (2039.0, {"float32": 19.5, "tf32": 156.0, "float16": 312.0, "bfloat16": 312.0}),
    "L40S": (864.0, {"float32": 91.6, "tf32": 183.0, "float16": 366.0, "bfloat16": 366.0}),
}


def peaks_for(name: str) -> tuple[float | None, dict[str, float]]:
    for fragment, (bw, tflops) in _PEAKS.items():
        if fragment in name:
            return bw, dict(tflops)
    return None, {}


def detect() -> Hardware:
    """Probe torch for GPUs (imports torch; call this only inside a worker)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        name = torch.cuda.get_device_name(0)
        # A host may mix generations: each GPU's own, so candidates meet the right ones.
        archs = tuple("sm_{}{}".format(*torch.cuda.get_device_capability(i))
                      for i in range(torch.cuda.device_count()))
        bw, tflops = peaks_for(name)
        return Hardware(label=f"{name} ({archs[0]})", device="cuda", gpu_arch=archs[0],
                        num_gpus=len(archs), gpu_archs=archs, interpreter=False,
                        peak_bandwidth_gbs=bw, peak_tflops=tflops)
    return Hardware(label=CPU_LABEL, device="cpu", gpu_arch="cpu", num_gpus=0, interpreter=True)


def to_json(hw: Hardware) -> dict[str, Any]:
    return asdict(hw)


def from_json(data: dict[str, Any]) -> Hardware:
    """The record back from JSON, including one stored before ``gpu_archs`` existed (its GPUs
    were all taken to be the first one's kind) and ignoring keys this version does not know."""
    known = {f.name for f in fields(Hardware)}
    data = {k: v for k, v in data.items() if k in known}
    archs = data.get("gpu_archs")
    if archs is None:
        gpus = int(data.get("num_gpus") or 0) if data.get("device") == "cuda" else 0
        archs = [data.get("gpu_arch", "")] * gpus
    return Hardware(**{**data, "gpu_archs": tuple(archs)})


def peak_tflops_for(hw: Hardware, dtype: str) -> float | None:
    """The matmul rate a legal kernel of this dtype can reach (float32 may use TF32 tensor
    cores, as Triton's tl.dot does by default); the best known rate for an unlisted dtype."""
    peaks = hw.peak_tflops or {}
    dtype = dtype.replace("torch.", "")
    return peaks.get("tf32" if dtype == "float32" else dtype) or max(peaks.values(), default=0.0) or None


def floor_seconds(flops: float, bytes_moved: float, hw: Hardware, dtype: str) -> tuple[float, float] | None:
    """(memory time, math time) at the hardware's ceilings; their max is the roofline floor."""
    if not hw.peak_bandwidth_gbs:
        return None
    peak = peak_tflops_for(hw, dtype)
    return bytes_moved / (hw.peak_bandwidth_gbs * 1e9), (flops / (peak * 1e12) if peak else 0.0)


def roofline_ms(flops: float, bytes_moved: float, hw: Hardware, dtype: str) -> float | None:
    """Lower bound on a kernel's runtime in ms from peak bandwidth and compute, or None."""
    floors = floor_seconds(flops, bytes_moved, hw, dtype) if hw.device == "cuda" else None
    return max(floors) * 1e3 if floors else None
