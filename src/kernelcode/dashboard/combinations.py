"""A templated kernel's combinations in the kernel panel: a sortable table and runtime against
the parameters (a heatmap for two, a line for one, one panel per pair for more).

``combination_figure`` is pure (results in, plotly Figure out), as the other figures.
"""

from __future__ import annotations

import itertools

import dash_ag_grid as dag
import plotly.graph_objects as go
from dash import dcc, html
from plotly.subplots import make_subplots

from openkernel.evaluation.host.templates import how_judged, judged_text
from openkernel.wording import three_figures


def _names(results: dict) -> list[str]:
    rows = results.get("combinations") or []
    return list(results.get("space") or (rows[0]["params"] if rows else {}))


def _ordered(values) -> list:
    """Options in their natural order (numbers by value)."""
    values = list(dict.fromkeys(values))
    try:
        return sorted(values)
    except TypeError:
        return values


def combination_figure(results: dict) -> go.Figure:
    """Median runtime (ms) of each correct combination against its parameters."""
    rows = [r for r in results.get("combinations") or [] if r.get("runtime", -1) > 0]
    names = [n for n in _names(results) if len({str(r["params"][n]) for r in rows}) > 1]
    fig = go.Figure()
    if not rows:
        fig.add_annotation(text="no combination was correct: nothing was timed", showarrow=False)
    elif len(names) <= 1:
        n = names[0] if names else _names(results)[0]
        xs = _ordered(r["params"][n] for r in rows)
        by = {str(r["params"][n]): r["runtime"] for r in rows}
        fig.add_trace(go.Scatter(x=[str(x) for x in xs], y=[by[str(x)] for x in xs],
                                 mode="lines+markers", name="median ms"))
        fig.update_layout(xaxis_title=n, yaxis_title="median runtime (ms)")
    else:
        pairs = list(itertools.combinations(names, 2))[:6]
        fig = make_subplots(rows=1, cols=len(pairs), subplot_titles=[f"{a} x {b}" for a, b in pairs])
        for col, (a, b) in enumerate(pairs, start=1):
            xs, ys = _ordered(r["params"][a] for r in rows), _ordered(r["params"][b] for r in rows)
            best: dict[tuple, float] = {}  # other parameters: the best of them
            for r in rows:
                key = (str(r["params"][a]), str(r["params"][b]))
                best[key] = min(best.get(key, float("inf")), r["runtime"])
            z = [[best.get((str(x), str(y))) for x in xs] for y in ys]
            fig.add_trace(go.Heatmap(x=[str(x) for x in xs], y=[str(y) for y in ys], z=z,
                                     colorscale="Viridis_r", colorbar={"title": "ms"},
                                     showscale=col == len(pairs),
                                     hovertemplate=f"{a}=%{{x}}<br>{b}=%{{y}}<br>%{{z:.3g}} ms"
                                                   "<extra></extra>"), row=1, col=col)
            fig.update_xaxes(title_text=a, type="category", row=1, col=col)
            fig.update_yaxes(title_text=b, type="category", row=1, col=col)
    fig.update_layout(height=320, margin=dict(l=50, r=20, t=40, b=40),
                      title="median runtime against the template's parameters")
    return fig


def combination_rows(results: dict) -> list[dict]:
    """One grid row per combination (the winner marked, with what its full checks judged)."""
    winner = results.get("winner")
    judged = results.get("winner_judged") or {}
    out = []
    for r in results.get("combinations") or []:
        won = r["params"] == winner
        row = {"winner": "★" if won else "", **{k: str(v) for k, v in r["params"].items()},
               "status": r["status"], "median_ms": three_figures(r["runtime"]) if r["runtime"] > 0 else None,
               "speedup": three_figures(r["speedup"]) if r["speedup"] > 0 else None,
               "judged": (three_figures(judged["speedup"]) if judged["speedup"] > 0
                          else judged["status"]) if won and judged else None,
               "why": next((ln for ln in (r.get("error") or r.get("dropped") or "").splitlines()
                            if ln.strip()), "")}  # a failure, or why screening dropped it
        out.append(row)
    return out


def combinations_section(k: dict) -> html.Details | None:
    """The kernel panel's "Template combinations" section, or None for a plain kernel."""
    results = k.get("template_results") or {}
    if not results.get("combinations"):
        return None
    # A column per parameter the combinations differ in; the others are said once, above it.
    combos = results["combinations"]
    names = [n for n in _names(results) if len({str(c["params"].get(n)) for c in combos}) > 1]
    same = [f"{n}={combos[0]['params'].get(n)}" for n in _names(results) if n not in names]
    columns = ([{"field": "winner", "headerName": "", "width": 50}]
               + [{"field": n, "headerName": n} for n in names]
               + [{"field": "status"}, {"field": "median_ms", "headerName": "median ms", "sort": "asc"},
                  {"field": "speedup", "headerName": "sweep x"},
                  {"field": "judged", "headerName": "judged x"}, {"field": "why", "flex": 2}])
    judged = judged_text(results)
    note = how_judged(results) + (f" The winner (★) had the full checks: {judged} (the full "
                                  "checks' figure is the kernel's)." if judged else
                                  " The winner (★) had the full checks." if results.get("winner")
                                  else "") + (
        f" The same in every combination: {', '.join(same)}." if same else "")
    return html.Details([
        html.Summary("Template combinations"),
        html.P(note, className="muted small"),
        dag.AgGrid(id="combination-grid", rowData=combination_rows(results), columnDefs=columns,
                   defaultColDef={"sortable": True, "resizable": True, "filter": True},
                   dashGridOptions={"domLayout": "autoHeight"}, style={"width": "100%"}),
        dcc.Graph(id="combination-figure", figure=combination_figure(results),
                  config={"displaylogo": False}),
    ], open=True, id="kernel-combinations")
