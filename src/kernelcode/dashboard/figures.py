"""Pure figure builders: kernel rows in, a plotly Figure out (or None when there is no data).

Callers decide what to say when a builder returns None, so the builders never guess at prose.
Rows are the light rows of ``queries.job_kernels``.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import plotly.graph_objects as go

from kernelcode.dashboard.graph import STATUS_COLORS, UNKNOWN_COLOR
from kernelcode.dashboard.profile import metric_value, roofline_point

_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=50, b=50), height=420)


# Statuses that are no verdict on a candidate's code (openkernel.schemas.NOT_JUDGED): drawn
# hollow, never as failures.
NOT_JUDGED = ("not_run", "evaluator_fault", "generation_failed")


def trajectory_figure(rows: list[dict]) -> go.Figure | None:
    """Best speedup so far over iterations, with every candidate as a coloured point.

    Failed candidates sit at speedup 0 so red walls stay visible; candidates never judged (not
    run here, an evaluator fault, no kernel generated) sit there hollow. The reference is the
    dotted line at 1.0, not a point, and never the best. The step line's hover gives the
    per-iteration summary (best so far, how many candidates of each status).
    """
    from kernelcode.dashboard.graph import best_kernel_id

    rows = [r for r in rows if not r.get("is_program0")]
    if not rows:
        return None
    fig = go.Figure()
    by_status = defaultdict(list)
    for r in rows:
        by_status[r.get("status") or "unknown"].append(r)
    for status, members in by_status.items():
        fig.add_trace(go.Scatter(
            x=[r["iteration"] for r in members],
            y=[max(r.get("runtime_improvement") or 0.0, 0.0) if r.get("correctness") else 0.0
               for r in members],
            mode="markers", name=status + (" (not judged)" if status in NOT_JUDGED else ""),
            marker=dict(color=STATUS_COLORS.get(status, UNKNOWN_COLOR), size=8,
                        symbol="circle-open" if status in NOT_JUDGED else "circle",
                        line=dict(width=1.5 if status in NOT_JUDGED else 0.5, color=(
                            STATUS_COLORS.get(status, UNKNOWN_COLOR) if status in NOT_JUDGED
                            else "#333"))),
            customdata=[[r["label"], r.get("runtime") or -1, r.get("description") or ""] for r in members],
            hovertemplate="%{customdata[0]}<br>speedup %{y:.3g}x<br>runtime %{customdata[1]:.3g} ms"
                          "<br>%{customdata[2]}<extra>" + status + "</extra>"))
    per_iter = defaultdict(list)
    for r in rows:
        per_iter[r["iteration"]].append(r)
    iterations = sorted(per_iter)
    ys, texts, best = [], [], None
    for it in iterations:
        members = per_iter[it]
        best_id = best_kernel_id(([best] if best else []) + members)  # the job's one rule
        best = next((r for r in [best, *members] if r and r["id"] == best_id), None)
        speed = best["runtime_improvement"] if best and (best.get("runtime_improvement") or 0) > 0 else 0.0
        mix = Counter(r.get("status") for r in members)
        ys.append(speed)
        texts.append(f"iteration {it}: best so far " + (f"{speed:.3f}x ({best['label']})" if best
                                                         else "none correct")
                     + "<br>" + ", ".join(f"{n} {s}" for s, n in mix.most_common()))
    fig.add_trace(go.Scatter(x=iterations, y=ys, mode="lines+markers", name="best so far",
                             line=dict(shape="hv", color="#111", width=2), text=texts,
                             hovertemplate="%{text}<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888", annotation_text="reference")
    fig.update_layout(title="Optimization trajectory", xaxis_title="iteration (the N of i<N>-b<M>)",
                      xaxis_tickformat="d", yaxis_title="speedup over the reference (x)", **_LAYOUT)
    return fig


def roofline_figure(rows: list[dict], peaks: dict) -> tuple[go.Figure | None, str]:
    """Arithmetic intensity against GFLOP/s, kernels placed, ceilings when peaks are known.

    Args:
        rows: kernel rows; a kernel is placed when its profiler data gives both coordinates.
        peaks: ``{"gflops": float|None, "bandwidth_gbs": float|None}`` (``profile.hardware_peaks``).

    Returns:
        ``(figure or None, note)``; the note says when the points are estimates or the
        ceilings are missing.
    """
    points = [(r, roofline_point(r)) for r in rows]
    points = [(r, p) for r, p in points if p is not None]
    if not points:
        return None, "No kernel has arithmetic intensity and FLOP/s data yet."
    fig = go.Figure()
    for est, name, symbol in ((False, "measured", "circle"), (True, "estimate", "circle-open")):
        group = [(r, p) for r, p in points if p[2] == est]
        if group:
            fig.add_trace(go.Scatter(
                x=[p[0] for _, p in group], y=[p[1] for _, p in group], mode="markers", name=name,
                marker=dict(symbol=symbol, size=10, line=dict(width=1.5),
                            color=[STATUS_COLORS.get(r.get("status"), UNKNOWN_COLOR) for r, _ in group]),
                text=[r["label"] for r, _ in group],
                hovertemplate="%{text}<br>AI %{x:.3g} FLOP/byte<br>%{y:.4g} GFLOP/s<extra>" + name + "</extra>"))
    xs = [p[0] for _, p in points]
    lo, hi = min(xs) / 4, max(xs) * 4
    notes = []
    compute, bandwidth = peaks.get("gflops"), peaks.get("bandwidth_gbs")
    if bandwidth and compute:
        ridge = compute / bandwidth
        lo, hi = min(lo, ridge / 8), max(hi, ridge * 8)
        fig.add_trace(go.Scatter(x=[lo, ridge, hi], y=[bandwidth * lo, compute, compute], mode="lines",
                                 name=f"roof: {bandwidth:.0f} GB/s, {compute:.0f} GFLOP/s",
                                 line=dict(color="#444", width=2)))
    elif bandwidth or compute:
        if bandwidth:
            fig.add_trace(go.Scatter(x=[lo, hi], y=[bandwidth * lo, bandwidth * hi], mode="lines",
                                     name=f"memory roof {bandwidth:.0f} GB/s", line=dict(color="#444")))
        else:
            fig.add_hline(y=compute, line_color="#444", annotation_text=f"compute roof {compute:.0f} GFLOP/s")
        notes.append("only one ceiling is known for this hardware")
    else:
        notes.append("no hardware peaks stored (profiler_data or run config), so no ceilings")
    if all(p[2] for _, p in points):
        notes.insert(0, "only estimates exist (FLOP counter and measured runtime, not a profiler)")
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="GFLOP/s")
    fig.update_layout(title="Roofline", **_LAYOUT)
    return fig, "; ".join(notes)


# (profiler_data key, gauge title, axis maximum or None for "the value's own scale")
GAUGES = [
    ("achieved_occupancy", "Occupancy %", 100.0),
    ("registers_per_thread", "Registers / thread", 255.0),
    ("shared_mem_per_block", "Shared mem / block (KiB)", 228.0),
    ("l1_hit_rate_pct", "L1 hit rate %", 100.0),
    ("l2_hit_rate_pct", "L2 hit rate %", 100.0),
    ("dram_throughput_pct", "DRAM bandwidth % of peak", 100.0),
    ("sm_throughput_pct", "SM throughput % of peak", 100.0),
]


def gauges_figure(profiler_data: dict, title: str = "Resource utilization") -> go.Figure | None:
    """Nsight-style gauges for whichever of ``GAUGES`` the profiler data holds."""
    present = [(key, name, top, metric_value(profiler_data, key)) for key, name, top in GAUGES]
    present = [g for g in present if g[3] is not None]
    if not present:
        return None
    cols = min(4, len(present))
    nrows = (len(present) + cols - 1) // cols
    fig = go.Figure()
    for i, (_key, name, top, value) in enumerate(present):
        row, col = divmod(i, cols)
        fig.add_trace(go.Indicator(
            mode="gauge+number", value=value, title=dict(text=name, font=dict(size=13)),
            gauge=dict(axis=dict(range=[0, max(top, value)]), bar=dict(color="#1f77b4")),
            domain=dict(row=row, column=col)))
    fig.update_layout(grid=dict(rows=nrows, columns=cols, pattern="independent"), title=title,
                      template="plotly_white", height=230 * nrows + 60, margin=dict(l=30, r=30, t=60, b=20))
    return fig


def _numeric_keys(rows: list[dict]) -> list[str]:
    counts: Counter = Counter()
    for r in rows:
        for source in ("features", "params"):
            for k, v in (_coords_source(r, source)).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    counts[f"{source}.{k}"] += 1
    return [k for k, _ in counts.most_common(3)]


def _coords_source(row: dict, source: str) -> dict:
    if source == "features":
        return row.get("features") or {}
    return (row.get("meta") or {}).get("params") or {}


def _coordinate(row: dict, key: str) -> float | None:
    source, _, name = key.partition(".")
    if source in ("features", "params"):
        value = _coords_source(row, source).get(name)
        return float(value) if isinstance(value, (int, float)) else None
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and value >= 0 else None


def landscape_figure(rows: list[dict]) -> go.Figure | None:
    """3-D scatter of kernel variants on their feature/parameter axes, coloured by speedup.

    Axes are the three numeric coordinates most kernels have (MAP-Elites ``features`` first,
    then tunable ``params``); missing ones are filled with iteration, branch and runtime.
    """
    keys = _numeric_keys(rows)
    for extra in ("iteration", "branch", "runtime"):
        if len(keys) >= 3:
            break
        keys.append(extra)
    pts = [(r, [_coordinate(r, k) for k in keys]) for r in rows]
    pts = [(r, c) for r, c in pts if all(v is not None for v in c)]
    if not pts:
        return None
    good = [(r, c) for r, c in pts if r.get("correctness") and (r.get("runtime_improvement") or 0) > 0]
    bad = [(r, c) for r, c in pts if (r, c) not in good]
    fig = go.Figure()
    if bad:
        fig.add_trace(go.Scatter3d(
            x=[c[0] for _, c in bad], y=[c[1] for _, c in bad], z=[c[2] for _, c in bad],
            mode="markers", name="not correct", text=[f"{r['label']} ({r.get('status')})" for r, _ in bad],
            marker=dict(size=3, color="#bbbbbb"), hovertemplate="%{text}<extra></extra>"))
    if good:
        fig.add_trace(go.Scatter3d(
            x=[c[0] for _, c in good], y=[c[1] for _, c in good], z=[c[2] for _, c in good],
            mode="markers", name="correct", text=[r["label"] for r, _ in good],
            marker=dict(size=5, color=[r["runtime_improvement"] for r, _ in good], colorscale="Viridis",
                        colorbar=dict(title="speedup"), showscale=True),
            hovertemplate="%{text}<br>speedup %{marker.color:.3f}x<extra></extra>"))
    fig.update_layout(title="Optimization landscape", template="plotly_white", height=520,
                      margin=dict(l=0, r=0, t=50, b=0),
                      scene=dict(xaxis_title=keys[0], yaxis_title=keys[1], zaxis_title=keys[2]))
    return fig
