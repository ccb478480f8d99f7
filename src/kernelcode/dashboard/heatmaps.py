"""The job page's two grids, as pure figure functions: the search archive's occupancy and one
kernel's memory workload (Nsight Compute's tables)."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from openkernel.evaluation.host.ncu_memory import KINDS, UNITS
from openkernel.search.occupancy import Cell, grid
from openkernel.wording import speedup_text


def archive_figure(cells: list[Cell]) -> go.Figure | None:
    """The archive's cells (rows: kind and kernels launched; columns: tile and warps), each
    coloured by its elite's speedup; a cell tried but with no correct kernel is grey."""
    if not cells:
        return None
    rows, columns, at = grid(cells)
    z, text = [], []
    for row in rows:
        z.append([])
        text.append([])
        for column in columns:
            cell = at.get((row, column))
            if cell is None:
                z[-1].append(None)
                text[-1].append("")
            elif cell.elite_id is None:
                z[-1].append(None)
                text[-1].append(f"none correct<br>of {cell.tried}")
            else:
                z[-1].append(cell.elite_speedup)
                text[-1].append(f"{cell.elite_label}<br>{speedup_text(cell.elite_speedup)}"
                                f"<br>best of {cell.tried}")
    tried = [[0 if at.get((r, c)) is None else 1 for c in columns] for r in rows]
    fig = go.Figure([
        # grey under every occupied cell, so one without a correct elite still shows
        go.Heatmap(z=tried, x=columns, y=rows, colorscale=[[0, "#ffffff"], [1, "#d0d7de"]],
                   showscale=False, hoverinfo="skip", zmin=0, zmax=1, xgap=3, ygap=3),
        go.Heatmap(z=z, x=columns, y=rows, text=text, texttemplate="%{text}",
                   colorscale="Viridis", colorbar=dict(title="elite speedup"), xgap=3, ygap=3,
                   hovertemplate="%{y}<br>%{x}<br>%{text}<extra></extra>"),
    ])
    fig.update_layout(title=f"MAP-Elites archive: {len(cells)} cells occupied, "
                            f"{sum(c.elite_id is not None for c in cells)} with a correct elite",
                      template="plotly_white", height=180 + 90 * len(rows),
                      margin=dict(l=40, r=40, t=60, b=60), xaxis_title="tile (elements per "
                      "program) · warps", yaxis_title="kind · kernels launched")
    return fig


def _amount(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _cell_text(cell: dict) -> str:
    parts = [f"{_amount(cell[q])} {name}" for q, name in (
        ("instructions", "inst"), ("requests", "req"), ("sectors", "sect"),
        ("wavefronts", "wavefronts")) if cell.get(q)]
    if cell.get("bytes"):
        parts.append(f"{_amount(cell['bytes'])}B")
    if parts and cell.get("hit_rate_pct") is not None:  # no traffic, no hit rate
        parts.append(f"hit {cell['hit_rate_pct']:.0f}%")
    return "<br>".join(parts)


def memory_figure(tables: dict, title: str) -> go.Figure | None:
    """Nsight Compute's memory workload tables as a heatmap: memory units (L1/TEX, L2, DRAM)
    by transfer kind, coloured by bytes moved (log scale), each cell its requests, sectors,
    bytes and hit rate (``openkernel.evaluation.host.ncu_memory``)."""
    cells = {(c["unit"], c["kind"]): c for c in tables.get("cells") or []}
    if not cells:
        return None
    kinds = [k for k in KINDS if any((u, k) in cells for u in UNITS)]
    units = [u for u in UNITS if any((u, k) in cells for k in kinds)]
    z = [[math.log10(cells[(u, k)]["bytes"]) if cells.get((u, k), {}).get("bytes") else None
          for k in kinds] for u in units]
    text = [[_cell_text(cells[(u, k)]) if (u, k) in cells else "" for k in kinds] for u in units]
    top = max((v for row in z for v in row if v is not None), default=1.0)
    low = max(top - 4, 0.0)  # four decades of bytes from light to dark
    ticks = list(range(math.ceil(low), int(top) + 1))
    fig = go.Figure(go.Heatmap(
        z=z, x=kinds, y=units, text=text, texttemplate="%{text}", colorscale="Blues",
        zmin=low, zmax=top,
        xgap=3, ygap=3, hovertemplate="%{y} · %{x}<br>%{text}<extra></extra>",
        colorbar=dict(title="bytes", tickvals=ticks, ticktext=[_amount(10 ** t) for t in ticks])))
    fig.update_layout(title=title, template="plotly_white", height=180 + 110 * len(units),
                      margin=dict(l=60, r=40, t=60, b=60), xaxis_title="transfer kind",
                      yaxis=dict(title="memory unit", autorange="reversed"))
    return fig
