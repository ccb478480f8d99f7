"""Reading a candidate's ``profiler_data`` for the Profiling Summary and the roofline.

Nsight Compute metrics and the engine's analytic estimates use slightly different keys; the
aliases below accept both, so the panels do not care which one filled the dict.
"""

from __future__ import annotations

from openkernel.schemas import Program

ALIASES: dict[str, tuple[str, ...]] = {
    "bottleneck": ("bottleneck",),
    "bandwidth_pct": ("dram_throughput_pct", "bandwidth_pct_of_peak", "bandwidth_pct",
                      "memory_throughput_pct"),
    "l2_hit": ("l2_hit_rate_pct", "l2_hit_pct", "l2_hit_rate"),
    "occupancy": ("achieved_occupancy_pct", "achieved_occupancy", "occupancy"),
    "headroom": ("headroom",),
    "flops": ("flops",),
    "bytes": ("bytes", "bytes_moved", "dram_bytes"),
    "intensity": ("arithmetic_intensity",),
    "gflops": ("gflops", "achieved_gflops"),
    "peak_gbs": ("peak_bandwidth_gbs", "peak_gbs"),
    "peak_gflops": ("peak_gflops", "peak_gflops_fp32"),
}


def pick(data: dict, name: str) -> float | str | None:
    """The first present, non-empty value among the aliases of ``name``."""
    for key in ALIASES[name]:
        value = data.get(key)
        if value not in (None, ""):
            return value
    return None


def profiled(program: Program | None) -> dict:
    """The program's profiler data, or an empty dict."""
    result = program.kernel_exec_result if program is not None else None
    return dict(result.profiler_data or {}) if result is not None else {}


def summary_rows(data: dict) -> list[tuple[str, str]]:
    """(name, value) lines of the Profiling Summary, only for what the data holds."""
    rows: list[tuple[str, str]] = []
    bottleneck = pick(data, "bottleneck")
    if bottleneck:
        rows.append(("Bottleneck", str(bottleneck)))
    bw = pick(data, "bandwidth_pct")
    if isinstance(bw, (int, float)):
        rows.append(("Bandwidth", f"{bw:.0f}% of peak"))
    l2 = pick(data, "l2_hit")
    if isinstance(l2, (int, float)):
        pct = l2 * 100 if l2 <= 1 else l2  # a fraction or a percentage, both seen in the wild
        rows.append(("L2 hit", f"{pct:.0f}%" + (" (poor)" if pct < 50 else "")))
    occ = pick(data, "occupancy")
    if isinstance(occ, (int, float)):
        rows.append(("Occupancy", f"{occ / 100 if occ > 1 else occ:.2f}"))
    headroom = pick(data, "headroom")
    if isinstance(headroom, (int, float)) and headroom > 0:
        rows.append(("Headroom", f"~{headroom:.1f}x"))
    return rows


def choose(best: Program | None, programs) -> tuple[Program | None, str]:
    """The program whose profile to show: the best one if profiled, else the latest profiled.

    ``programs`` is iterated latest first and only as far as needed (it may be a generator).
    """
    if profiled(best):
        return best, "best"
    for program in programs:  # latest first
        if profiled(program):
            return program, "latest"
    return None, ""


def why_no_profile(on_cpu: bool, judged: int) -> str:
    """The line the panel shows when no candidate carries profiler data."""
    if judged == 0:
        return "No candidate judged yet."
    if on_cpu:
        return ("No profiler on the CPU: Triton runs under its interpreter here, so there are "
                "no GPU counters, and interpreter timings say nothing about a GPU.")
    return ("No profiler data: the candidates failed before profiling, or Nsight Compute "
            "(ncu) is not available on this machine.")
