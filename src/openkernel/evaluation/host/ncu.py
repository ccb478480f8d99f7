"""Nsight Compute profiles: the command, the CSV parser, and the bottleneck classifier.

A correct candidate is re-run once under ``ncu --clock-control none`` (clocks as the card
runs them, like the benchmark), restricted to the NVTX range around the candidate's forward,
so only its own kernels are profiled. Without ncu (or on the CPU) the roofline estimate from
the task's FLOPs and minimum bytes stands in, labelled ``estimate``.
"""

from __future__ import annotations

import csv
import functools
import io
import shutil

from openkernel.evaluation.protocol import NVTX_RANGE

# ncu metric -> profiler_data key
METRICS = {
    "gpu__time_duration.sum": "duration_us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_rate_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__shared_mem_per_block_static": "shared_mem_static_bytes",
    "launch__shared_mem_per_block_dynamic": "shared_mem_dynamic_bytes",
    "dram__bytes.sum": "dram_bytes",
}
_TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}
_BYTE_UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def find_ncu() -> str | None:
    for candidate in ("ncu", "/usr/local/cuda/bin/ncu"):
        path = shutil.which(candidate)
        if path:
            return path
    return None


def ncu_command(ncu: str, python_argv: list[str]) -> list[str]:
    """ncu around a worker command, profiling only kernels inside the candidate's NVTX range."""
    return [
        ncu, "--clock-control", "none", "--csv", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
        "--metrics", ",".join(METRICS), "--target-processes", "all", *python_argv,
    ]


def wrapper(profiler):
    """The command a profiled worker runs under: ``profiler`` is the ncu binary (the summary
    profile) or a ``ncu_memory.MemoryProfile`` (the memory workload tables)."""
    from openkernel.evaluation.host.ncu_memory import MemoryProfile, memory_command

    if isinstance(profiler, MemoryProfile):
        return functools.partial(memory_command, profiler.binary)
    return functools.partial(ncu_command, profiler)


def _number(text: str) -> float | None:
    text = (text or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict]:
    """One dict per profiled kernel launch: name, grid, block, and the METRICS values."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    kernels: dict[str, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        key = METRICS.get(row.get("Metric Name", ""))
        if key is None:
            continue
        launch = kernels.setdefault(row["ID"], {
            "kernel": row.get("Kernel Name", ""), "grid": row.get("Grid Size", ""),
            "block": row.get("Block Size", ""),
        })
        value = _number(row.get("Metric Value", ""))
        if value is None:
            continue
        unit = (row.get("Metric Unit") or "").strip()
        if key == "duration_us":
            value *= _TIME_UNITS.get(unit, 1e-3)
        elif key == "dram_bytes":
            value *= _BYTE_UNITS.get(unit, 1)
        launch[key] = value
    return list(kernels.values())


def classify(dram_pct: float, sm_pct: float) -> str:
    """Speed-of-light rule: the unit nearest its peak limits the kernel; neither near -> latency."""
    if max(dram_pct, sm_pct) < 60.0:
        return "latency_bound"
    return "memory_bound" if dram_pct >= sm_pct else "compute_bound"


def summarize(launches: list[dict], flops: float = 0.0, bytes_moved: float = 0.0,
              peak_bandwidth_gbs: float | None = None, peak_tflops: float | None = None) -> dict:
    """Aggregate a candidate's kernels (time-weighted) into EvalResult.profiler_data."""
    launches = [k for k in launches if k.get("duration_us")]
    if not launches:
        return {}
    total = sum(k["duration_us"] for k in launches)

    def weighted(key: str) -> float:
        return sum(k.get(key, 0.0) * k["duration_us"] for k in launches) / total

    data = {
        "source": "ncu",
        "estimate": False,
        "kernels": len(launches),
        "kernel_names": sorted({k["kernel"][:80] for k in launches}),
        "duration_us": total,
        "dram_throughput_pct": weighted("dram_throughput_pct"),
        "sm_throughput_pct": weighted("sm_throughput_pct"),
        "l2_hit_rate_pct": weighted("l2_hit_rate_pct"),
        "achieved_occupancy_pct": weighted("achieved_occupancy_pct"),
        "registers_per_thread": max(k.get("registers_per_thread", 0) for k in launches),
        "shared_mem_per_block": max(k.get("shared_mem_static_bytes", 0) + k.get("shared_mem_dynamic_bytes", 0)
                                    for k in launches),
        "dram_bytes": sum(k.get("dram_bytes", 0.0) for k in launches),
    }
    data["bottleneck"] = classify(data["dram_throughput_pct"], data["sm_throughput_pct"])
    seconds = total * 1e-6
    if flops:
        data["flops"] = flops
        data["gflops"] = flops / seconds / 1e9
    if bytes_moved:
        data["bytes"] = bytes_moved
        if flops:  # no FLOPs counted: the intensity is unknown, not zero
            data["arithmetic_intensity"] = flops / bytes_moved
    floors = []
    if peak_bandwidth_gbs and bytes_moved:
        floors.append(bytes_moved / (peak_bandwidth_gbs * 1e9))
    if peak_tflops and flops:
        floors.append(flops / (peak_tflops * 1e12))
    if floors and max(floors) > 0:
        data["headroom"] = seconds / max(floors)
    return data


def format_profile(data: dict) -> str:
    """The lines later prompts read when this kernel is sampled as a parent."""
    if not data:
        return ""
    if data.get("estimate"):
        head = "Profile (analytic estimate, no profiler):"
    else:
        head = f"Profile (Nsight Compute, {data.get('kernels', '?')} kernel(s)):"
    parts = [head]
    if "bottleneck" in data:
        parts.append(f"  bottleneck: {data['bottleneck']}")
    for key, label, fmt in (
        ("duration_us", "duration", "{:.1f} us"),
        ("dram_throughput_pct", "DRAM throughput", "{:.0f}% of peak"),
        ("sm_throughput_pct", "SM throughput", "{:.0f}% of peak"),
        ("l2_hit_rate_pct", "L2 hit rate", "{:.0f}%"),
        ("achieved_occupancy_pct", "achieved occupancy", "{:.0f}%"),
        ("registers_per_thread", "registers/thread", "{:.0f}"),
        ("shared_mem_per_block", "shared memory/block", "{:.0f} B"),
        ("gflops", "achieved", "{:.0f} GFLOP/s"),
        ("achieved_gbs", "achieved bandwidth", "{:.0f} GB/s"),
        ("headroom", "headroom vs roofline", "~{:.1f}x"),
    ):
        if data.get(key) is not None:
            parts.append(f"  {label}: " + fmt.format(data[key]))
    return "\n".join(parts)
