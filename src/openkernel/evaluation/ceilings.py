"""Hardware ceilings measured on the device itself, once, and cached.

Memory bandwidth from a large device-to-device copy (bytes read + bytes written over time) and
matmul rates per dtype from large products through torch (cuBLAS). Datasheet figures are leads;
these are what the roofline and the critic use. Runs inside a worker process with CUDA.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CACHE_VERSION = 1


def cache_path() -> Path:
    root = os.environ.get("OPENKERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "openkernel")
    return Path(root) / "ceilings.json"


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
    return {"version": CACHE_VERSION, "device": torch.cuda.get_device_name(dev),
            "peak_bandwidth_gbs": bandwidth, "peak_tflops": tflops}


def load_all(path: Path | None = None) -> dict:
    """Every cached entry, by device name (read in the engine; no torch needed)."""
    try:
        data = json.loads((path or cache_path()).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and v.get("version") == CACHE_VERSION}


def save(entry: dict, path: Path | None = None) -> None:
    """Add one device's measured entry to the cache (written by the engine)."""
    path = path or cache_path()
    data = load_all(path)
    data[entry["device"]] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache still gives this run its numbers
