"""Reading profiler data and hardware peaks, whichever of the usual spellings a row holds.

Profilers (Nsight Compute, the FLOP-counter estimate) and the engine's Hardware record spell
things slightly differently (a fraction or a percentage, bytes or KiB, TFLOP/s per dtype); this
module turns them into the units the figures draw, in one place.
"""

from __future__ import annotations


def _num(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def metric_value(profiler_data: dict, key: str) -> float | None:
    """A gauge value in the gauge's unit (percent, count or KiB), or None when absent."""
    data = profiler_data or {}
    value = _num(data.get(key))
    if value is None and key == "achieved_occupancy":
        value = _num(data.get("achieved_occupancy_pct"))
    if value is None:
        return None
    if key == "achieved_occupancy" and value <= 1.0:
        return value * 100.0  # Nsight reports a fraction in some sections, a percent in others
    if key == "shared_mem_per_block":
        return value / 1024.0 if value > 1024 else value  # bytes -> KiB
    return value


def roofline_point(row: dict) -> tuple[float, float, bool] | None:
    """``(arithmetic intensity, GFLOP/s, is_estimate)`` of a kernel, or None.

    The rate is the engine's (``gflops``, from Nsight Compute or the estimate on a GPU), never
    re-derived from the runtime here: on the CPU the engine leaves it out on purpose, since
    Triton-interpreter timings say nothing about a GPU's FLOP/s.
    """
    data = row.get("profiler_data") or {}
    ai = _num(data.get("arithmetic_intensity"))
    gflops = _num(data.get("gflops"))
    flops = _num(data.get("flops"))
    moved = _num(data.get("bytes"))
    if ai is None and flops and moved:
        ai = flops / moved
    if not ai or not gflops or ai <= 0 or gflops <= 0:
        return None
    return ai, gflops, bool(data.get("estimate", False))


def _peaks_in(data: dict) -> tuple[float | None, float | None]:
    gflops = _num(data.get("peak_gflops"))
    tflops = data.get("peak_tflops")
    if gflops is None and isinstance(tflops, dict):
        values = [_num(v) for v in tflops.values()]
        values = [v for v in values if v]
        # fp32 is what an unannotated kernel runs at; otherwise the highest stored
        gflops = 1000.0 * (_num(tflops.get("fp32")) or _num(tflops.get("float32")) or max(values, default=0)) or None
    elif gflops is None:
        gflops = 1000.0 * _num(tflops) if _num(tflops) else None
    bandwidth = None
    for key in ("peak_bandwidth_gbs", "peak_dram_bandwidth_gbs", "peak_bandwidth"):
        bandwidth = bandwidth or _num(data.get(key))
    return gflops, bandwidth


def hardware_peaks(rows: list[dict], run_configs: list[dict]) -> dict:
    """Compute and bandwidth ceilings for the roofline, from profiler data or run configs.

    Looks in each kernel's ``profiler_data`` first (measured on the machine that ran it), then
    in each run's ``config`` and its ``hardware`` section.

    Returns:
        ``{"gflops": float|None, "bandwidth_gbs": float|None}``.
    """
    gflops = bandwidth = None
    sources = [r.get("profiler_data") or {} for r in rows]
    for config in run_configs:
        if isinstance(config, dict):
            sources.append(config)
            if isinstance(config.get("hardware"), dict):
                sources.append(config["hardware"])
    for data in sources:
        g, b = _peaks_in(data)
        gflops, bandwidth = gflops or g, bandwidth or b
        if gflops and bandwidth:
            break
    return {"gflops": gflops, "bandwidth_gbs": bandwidth}


def best_profiled(rows: list[dict], prefer_id: str | None = None) -> dict | None:
    """The kernel whose profiler data the gauges show: ``prefer_id`` if it has any gauge,
    else the fastest correct kernel with gauge data, else any kernel with gauge data."""
    from kernelcode.dashboard.figures import GAUGES  # figures imports this module

    def has_gauges(r: dict) -> bool:
        return any(metric_value(r.get("profiler_data") or {}, k) is not None for k, _, _ in GAUGES)

    with_data = [r for r in rows if has_gauges(r)]
    for r in with_data:
        if r["id"] == prefer_id:
            return r
    correct = [r for r in with_data if r.get("correctness")]
    pool = correct or with_data
    return max(pool, key=lambda r: r.get("runtime_improvement") or -1.0) if pool else None
