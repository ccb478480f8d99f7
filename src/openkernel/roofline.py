"""Hardware ceilings and the roofline floor: datasheet peaks, and the bound they put on a kernel.

Peak figures start as datasheet values (dense, no sparsity); on a GPU the hardware worker
replaces them with ceilings measured on the device (a large device copy and large matmuls,
cached per device model), which the roofline, the critic and the too-good-to-be-true flag then
use. Pure functions: no torch, no CUDA.
"""

from __future__ import annotations

from openkernel.records import Hardware, TaskProbe

# name fragment -> (HBM GB/s, {dtype: TFLOP/s}); dense tensor-core peaks for 16-bit types.
_PEAKS: dict[str, tuple[float, dict[str, float]]] = {
    "H200": (4800.0, {"float32": 67.0, "tf32": 495.0, "float16": 990.0, "bfloat16": 990.0}),
    "H100": (3350.0, {"float32": 67.0, "tf32": 495.0, "float16": 990.0, "bfloat16": 990.0}),
    "A100": (2039.0, {"float32": 19.5, "tf32": 156.0, "float16": 312.0, "bfloat16": 312.0}),
    "L40S": (864.0, {"float32": 91.6, "tf32": 183.0, "float16": 366.0, "bfloat16": 366.0}),
}


def arithmetic_intensity(flops: float, bytes_moved: float) -> float | None:
    """FLOP per byte, or None when either is unknown (0: nothing counted, never a real zero)."""
    return flops / bytes_moved if flops > 0 and bytes_moved > 0 else None


def peaks_for(name: str) -> tuple[float | None, dict[str, float]]:
    for fragment, (bw, tflops) in _PEAKS.items():
        if fragment in name:
            return bw, dict(tflops)
    return None, {}


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


def roofline_estimate(runtime_ms: float, probe: TaskProbe, hw: Hardware) -> dict:
    """Achieved rates and the roofline bound for a kernel of the task, from its runtime."""
    if runtime_ms <= 0 or not (probe.flops or probe.bytes_moved):
        return {}
    est = {
        "estimate": True,
        "source": "analytic (FLOPs counted from the reference's ops, minimum bytes)",
        "bytes": probe.bytes_moved,
    }
    intensity = arithmetic_intensity(probe.flops, probe.bytes_moved)
    if probe.flops > 0:  # 0 means not counted: no FLOP figure rather than a wrong zero
        est["flops"] = probe.flops
    if intensity is not None:
        est["arithmetic_intensity"] = intensity
    if hw.interpreter:  # interpreter timings say nothing about achieved GPU rates
        return est
    seconds = runtime_ms / 1e3
    if probe.flops > 0:
        est["gflops"] = probe.flops / seconds / 1e9
    est["achieved_gbs"] = probe.bytes_moved / seconds / 1e9
    dtype = probe.output_dtypes[0] if probe.output_dtypes else "float32"
    peak_tflops = peak_tflops_for(hw, dtype)
    if hw.peak_bandwidth_gbs:
        est["peak_bandwidth_gbs"] = hw.peak_bandwidth_gbs
        est["dram_throughput_pct"] = 100.0 * est["achieved_gbs"] / hw.peak_bandwidth_gbs
    if peak_tflops:
        est["peak_gflops"] = peak_tflops * 1e3
    floors = floor_seconds(probe.flops, probe.bytes_moved, hw, dtype)
    if floors:
        t_mem, t_math = floors
        est["bottleneck"] = "memory_bound" if t_mem >= t_math else "compute_bound"
        est["headroom"] = seconds / max(floors) if max(floors) > 0 else None
    return est
