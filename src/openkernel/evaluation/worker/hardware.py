"""Worker mode ``hardware``: what the candidates run on, and its measured ceilings.

The engine must not initialise CUDA itself (a forked or long-lived engine holding a CUDA
context is fragile, and it must stay importable on machines without torch.cuda), so
:func:`detect` runs here, in a worker, and the engine rebuilds the :class:`Hardware` record
from the JSON it reports. :func:`measure` gives the ceilings the roofline uses: bandwidth from a
large device-to-device copy (bytes read + written over time) and matmul rates per dtype from
large products through torch (cuBLAS); datasheet figures are only leads.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

from openkernel.evaluation.protocol import CEILINGS_VERSION, Job
from openkernel.records import CPU_LABEL, Hardware, hardware_to_json
from openkernel.roofline import peaks_for


# Settings that change what the reference's timings are (compiler choices, math modes);
# folders and log switches do not.
_SOFTWARE_VARS = ("TORCHINDUCTOR_", "TORCH_", "PYTORCH_", "TRITON_", "CUBLAS_", "CUDNN_",
                  "NVIDIA_TF32", "OMP_NUM_THREADS")
_NOT_SOFTWARE = re.compile(r"DIR|PATH|CACHE|HOME|LOG|DEBUG|VERBOSE|PROTECT")


def software() -> dict:
    """Versions and backend flags of this worker, as every worker has them before a task's
    code runs (a reference that sets a flag itself is in the task's digest)."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cuda = torch.backends.cuda.matmul
    return {
        "torch": torch.__version__, "triton": triton_version, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "flags": {
            "matmul_allow_tf32": cuda.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "matmul_fp16_reduced_reduction": cuda.allow_fp16_reduced_precision_reduction,
            "matmul_bf16_reduced_reduction": cuda.allow_bf16_reduced_precision_reduction,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        },
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith(_SOFTWARE_VARS) and not _NOT_SOFTWARE.search(k)},
    }


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
                        peak_bandwidth_gbs=bw, peak_tflops=tflops,
                        gpu_memory_bytes=int(torch.cuda.get_device_properties(0).total_memory),
                        software=software())
    return Hardware(label=CPU_LABEL, device="cpu", gpu_arch="cpu", num_gpus=0, interpreter=True,
                    software=software())



def _time_ms(fn, repeats: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def measure(device_index: int = 0) -> dict:
    """Measure bandwidth (GB/s) and matmul TFLOP/s for float32, tf32, float16, bfloat16."""
    import torch

    dev = torch.device("cuda", device_index)
    n = 1 << 28  # 1 GiB of float32 per buffer: far beyond L2
    src = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src))
    bandwidth = 2 * src.numel() * 4 / (ms / 1e3) / 1e9
    src = dst = None  # free the 2 GiB before the matmuls
    tflops = {}
    size = 8192
    for name, dtype, tf32 in (("float32", torch.float32, False), ("tf32", torch.float32, True),
                              ("float16", torch.float16, False), ("bfloat16", torch.bfloat16, False)):
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            a = torch.randn(size, size, device=dev, dtype=dtype)
            b = torch.randn(size, size, device=dev, dtype=dtype)
            ms = _time_ms(lambda: a @ b, repeats=10)
            tflops[name] = 2 * size**3 / (ms / 1e3) / 1e12
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        a = b = None
    torch.cuda.empty_cache()
    return {"version": CEILINGS_VERSION, "device": torch.cuda.get_device_name(dev),
            "peak_bandwidth_gbs": bandwidth, "peak_tflops": tflops}




def run_hardware(job: Job, ch) -> dict:
    """Worker mode ``hardware``: the record, with ceilings measured unless already known."""
    hw = detect()
    if hw.device != "cuda":
        return {"hardware": hardware_to_json(hw)}
    import torch

    name = torch.cuda.get_device_name(0)
    entry = (job.known_ceilings or {}).get(name)
    measured = entry is None
    if measured:
        entry = measure(0)
    hw = replace(hw, peak_bandwidth_gbs=entry["peak_bandwidth_gbs"],
                 peak_tflops=dict(entry["peak_tflops"]))
    return {"hardware": hardware_to_json(hw), "ceilings": entry, "ceilings_measured": measured}
