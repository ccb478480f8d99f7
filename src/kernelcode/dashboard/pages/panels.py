"""The dashboard panels of a job page, one tab each, drawn only while their tab is open.

Each panel's callback listens to the open tab and the job's signature, so a live job redraws
the panel in view and nothing else; the experiment table keeps its filters across refreshes
because rows are matched by kernel id (``getRowId``).
"""

from __future__ import annotations

import dash_ag_grid as dag
from dash import Input, Output, Patch, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from kernelcode.dashboard.components import diff_table
from kernelcode.dashboard.figures import (
    gauges_figure,
    landscape_figure,
    roofline_figure,
    trajectory_figure,
)
from kernelcode.dashboard.graph import STATUS_COLORS
from kernelcode.dashboard.health import branches_from_config, job_health
from kernelcode.dashboard.heatmaps import archive_figure, memory_figure
from kernelcode.dashboard.profile import best_profiled, hardware_peaks
from openkernel.search.occupancy import occupancy
from openkernel.wording import flagged_why, speedup_text, three_figures

TABS = [("trajectory", "Optimization trajectory"), ("roofline", "Roofline"), ("resources", "Resources"),
        ("table", "Experiment table"), ("diff", "Code diff"), ("landscape", "Optimization landscape"),
        ("archive", "Archive"), ("memory", "Memory heatmap"), ("health", "Run health")]
# The memory heatmap is Nsight Compute's memory workload tables, recorded on demand
# (eval_config.profile_memory); the tab says why a kernel has none.
MEMORY_ON_CPU = ("No memory heatmap: this job ran on the CPU, where there is no GPU memory "
                 "hierarchy to measure (Nsight Compute profiles NVIDIA GPUs only). On a GPU with "
                 "ncu, run the job with --set eval_config.profile_memory=true: each correct "
                 "candidate's L1/TEX, L2 and DRAM traffic is recorded and drawn here.")
MEMORY_NOT_RECORDED = ("No memory tables recorded for {label}: run the job (or `openkernel "
                       "eval TASK kernel.py`, with the code from `openkernel show {id} --field "
                       "code`) with --set eval_config.profile_memory=true on a GPU with Nsight "
                       "Compute (ncu). Only correct candidates are profiled.")
NO_PROFILE = ("No profiler data for this job: its candidates ran on the CPU (no GPU profiler "
              "there), Nsight Compute (ncu) is not installed, or eval_config.profile is off.")


def _grid() -> dag.AgGrid:
    status_style = {"styleConditions": [
        {"condition": f"params.value == '{s}'", "style": {"backgroundColor": c, "color": "white"}}
        for s, c in STATUS_COLORS.items()]}
    num = {"filter": "agNumberColumnFilter", "type": "numericColumn"}
    cols = [
        {"field": "label", "pinned": "left", "width": 110},
        {"field": "status", "cellStyle": status_style, "width": 130},
        {"field": "speedup", "headerName": "speedup x", "sort": "desc", **num},
        {"field": "vs_compile", "headerName": "vs compile x", **num},
        {"field": "runtime", "headerName": "median ms", **num},
        {"field": "n_trials", "headerName": "trials", **num},
        {"field": "cv", "headerName": "CV %", **num},
        {"field": "iteration", **num}, {"field": "branch", **num},
        {"field": "model"}, {"field": "integrity"}, {"field": "description", "flex": 1, "minWidth": 220},
        {"field": "created"},
    ]
    return dag.AgGrid(
        id="exp-grid", columnDefs=cols, rowData=[], getRowId="params.data.id",
        defaultColDef={"filter": True, "sortable": True, "resizable": True, "floatingFilter": True},
        dashGridOptions={"pagination": True, "paginationPageSize": 100, "animateRows": False,
                         "quickFilterText": ""},
        style={"height": "560px", "width": "100%"})


def tabs(source, data) -> html.Div:
    """Tab headers and one container per panel (hidden unless its tab is open).

    The health tab is open first and comes drawn with the page, so loading a job costs no
    panel request while the graph draws.
    """
    bodies = {
        "table": [dcc.Input(id="table-search", type="search", placeholder="quick search (any column)",
                            debounce=0.2, className="search"), _grid(), dcc.Store(id="grid-sig")],
        "health": html.Div(health_table(source, data), id="health-body"),
        "diff": [html.Div([dcc.Dropdown(id="diff-a", placeholder="kernel A", className="dd"),
                           dcc.Dropdown(id="diff-b", placeholder="kernel B", className="dd")],
                          className="toolbar"), html.Div(id="diff-body")],
    }
    containers = [html.Div(bodies.get(name, html.Div(id=f"{name}-body")), id=f"panel-{name}",
                           style={"display": "block" if name == "health" else "none"}) for name, _ in TABS]
    return html.Div([dcc.Tabs(id="job-tabs", value="health",
                              children=[dcc.Tab(label=t, value=v) for v, t in TABS])] + containers,
                    className="panels")


def _note(text: str) -> html.P:
    return html.P(text, className="note")


def _graph(fig) -> dcc.Graph:
    return dcc.Graph(figure=fig, config={"displaylogo": False})


def table_rows(rows: list[dict]) -> list[dict]:
    """Experiment table rows from light kernel rows: the candidates (not the reference, which
    the pager counted as one), their figures to three significant figures."""
    out = []
    for r in rows:
        if r.get("is_program0"):
            continue
        st, meta = r.get("runtime_stats") or {}, r.get("meta") or {}
        flags = [f"violation: {meta['integrity_violation']}"] if meta.get("integrity_violation") else []
        flags += [f"flagged: {flagged_why(meta)}"] if meta.get("flagged_for_review") else []
        speed = r.get("runtime_improvement")
        out.append({
            "id": r["id"], "label": r["label"], "status": r["status"],
            "speedup": three_figures(speed) if speed and speed > 0 else None,
            "vs_compile": three_figures(r.get("improve_over_compile")),
            "runtime": three_figures(r.get("runtime")) if (r.get("runtime") or -1) > 0 else None,
            "n_trials": st.get("n_trials"),
            "cv": three_figures(st["cv"] * 100) if st.get("cv") is not None else None,
            "iteration": r["iteration"],
            "branch": r["branch"], "model": r.get("model") or "", "integrity": ", ".join(flags),
            "description": (r.get("description") or "")[:300], "created": r.get("created_at") or "",
        })
    return out


def _trajectory(source, data, selected):
    fig = trajectory_figure(data.rows)
    return _graph(fig) if fig else _note("No kernels yet.")


ON_CPU = ("No roofline for a job run on the CPU: Triton ran under its interpreter, whose "
          "timings give no FLOP/s to place a kernel, and there are no GPU ceilings. Run the job "
          "on a GPU.")


def _roofline(source, data, selected):
    fig, note = roofline_figure(data.rows, hardware_peaks(data.rows, [r.get("config") for r in data.runs]))
    if fig is None and data.rows and all((r.get("hardware") or "").startswith("CPU") for r in data.rows):
        note = ON_CPU
    return ([_note(note)] if note else []) + ([_graph(fig)] if fig else [])


def _resources(source, data, selected):
    row = best_profiled(data.rows, selected)
    if row is None:
        return _note(NO_PROFILE)
    prof = row.get("profiler_data") or {}
    title = f"Resource utilization: {row['label']}" + (" (estimate)" if prof.get("estimate") else "")
    extra = f"bottleneck: {prof['bottleneck']}" if prof.get("bottleneck") else ""
    which = "" if row["id"] == selected else " (the fastest profiled kernel; click another to compare)"
    return [_note(f"Showing {row['label']}{which}. {extra}"), _graph(gauges_figure(prof, title))]


def _landscape(source, data, selected):
    fig = landscape_figure(data.rows)
    return _graph(fig) if fig else _note("No kernel has feature or parameter coordinates yet.")


def _archive(source, data, selected):
    fig = archive_figure(occupancy(data.rows))
    return _graph(fig) if fig else _note("No candidate placed in the archive yet.")


def _memory(source, data, selected):
    if data.rows and all((r.get("hardware") or "").startswith("CPU") for r in data.rows):
        return html.P(MEMORY_ON_CPU, className="note", id="memory-help")
    with_tables = [r for r in data.rows if ((r.get("profiler_data") or {}).get("memory_tables")
                                            or {}).get("cells")]
    row = data.by_id.get(selected) or data.by_id.get(data.best_id)
    if row is None or row not in with_tables:
        row = row if not with_tables else max(
            with_tables, key=lambda r: r.get("runtime_improvement") or 0)
    tables = (row or {}).get("profiler_data", {}).get("memory_tables") or {}
    if not tables.get("cells"):
        why = tables.get("error")
        text = MEMORY_NOT_RECORDED.format(label=row["label"] if row else "this job",
                                          id=row["id"] if row else "KERNEL_ID")
        return html.P(text + (f" (The last attempt: {why}.)" if why else ""), className="note",
                      id="memory-help")
    which = "" if row["id"] == selected else " (click another kernel to see its own)"
    title = f"Memory workload: {row['label']} ({tables.get('source', 'Nsight Compute')}){which}"
    return _graph(memory_figure(tables, title))


def health_table(source, data, selected=None) -> html.Table:
    """The seed's symptom table for the job, with a mark per row."""
    config = data.runs[-1].get("config") if data.runs else None
    head = html.Tr([html.Th(h) for h in ("", "symptom", "what this job shows", "likely cause", "where to look")])
    icon = {"warn": "⚠", "ok": "✓", "n/a": "·"}
    body = [html.Tr([html.Td(icon[c.state], className=f"state-{c.state.replace('/', '')}"), html.Td(c.symptom),
                     html.Td(c.evidence), html.Td(c.cause), html.Td(c.where)])
            for c in job_health(data.rows, branches_from_config(config))]
    return html.Table([html.Thead(head), html.Tbody(body)], className="health", id="health-table")


# Panels drawn into "<name>-body" by the one callback below; the table and the diff have their own.
BUILDERS = {"trajectory": _trajectory, "roofline": _roofline, "resources": _resources,
            "landscape": _landscape, "archive": _archive, "memory": _memory,
            "health": health_table}
FOLLOW_SELECTION = {"resources", "memory"}


def register(app, source) -> None:
    """Callbacks of the panels. None runs when the page loads (each would be a request)."""
    from kernelcode.dashboard.app import guarded

    names = list(BUILDERS)

    @app.callback([Output(f"panel-{n}", "style") for n, _ in TABS], Input("job-tabs", "value"),
                  prevent_initial_call=True)
    def _show(tab):
        return [{"display": "block" if n == tab else "none"} for n, _ in TABS]

    def job_for(tab, want, key, sig):
        if tab != want:
            raise PreventUpdate
        data = source.job(key["task"], key["job"], tuple(sig) if sig else None)
        if data is None:
            raise PreventUpdate
        return data

    error = guarded(lambda msg: html.Div(msg, className="error"))

    @error
    def draw(name, data, selected):
        return BUILDERS[name](source, data, selected)

    # One callback for every drawn panel: a tab switch or a live refresh costs one request,
    # and only the open panel is computed and sent.
    @app.callback([Output(f"{n}-body", "children") for n in names], Input("job-tabs", "value"),
                  Input("job-sig", "data"), Input("selected-kernel", "data"), State("job-key", "data"),
                  prevent_initial_call=True)
    def _panels(tab, sig, selected, key):
        if tab not in BUILDERS or (ctx.triggered_id == "selected-kernel" and tab not in FOLLOW_SELECTION):
            raise PreventUpdate
        data = job_for(tab, tab, key, sig)
        return [draw(n, data, selected) if n == tab else no_update for n in names]

    @app.callback(Output("exp-grid", "rowData"), Output("grid-sig", "data"), Input("job-tabs", "value"),
                  Input("job-sig", "data"), State("job-key", "data"), State("grid-sig", "data"),
                  prevent_initial_call=True)
    @guarded(lambda msg: (no_update, no_update))
    def _grid_rows(tab, sig, key, shown):
        if tab != "table" or (shown and shown == sig):
            raise PreventUpdate  # the grid already holds this version of the job
        return table_rows(job_for(tab, "table", key, sig).rows), sig

    @app.callback(Output("exp-grid", "dashGridOptions"), Input("table-search", "value"), prevent_initial_call=True)
    def _quick(text):
        patch = Patch()
        patch["quickFilterText"] = text or ""
        return patch

    @app.callback(Output("diff-a", "options"), Output("diff-b", "options"), Output("diff-a", "value"),
                  Output("diff-b", "value"), Input("job-tabs", "value"), Input("job-sig", "data"),
                  State("job-key", "data"), State("diff-a", "value"), State("diff-b", "value"),
                  prevent_initial_call=True)
    @guarded(lambda msg: (no_update,) * 4)
    def _diff_options(tab, sig, key, a, b):
        data = job_for(tab, "diff", key, sig)
        opts = [{"label": f"{r['label']} [{r['status']}]" + (
            f" {speedup_text(r['runtime_improvement'])}" if (r.get("runtime_improvement") or -1) > 0 else ""),
                 "value": r["id"]} for r in data.rows]
        if not (a and b) and data.rows:
            best = data.by_id.get(data.best_id) or data.rows[-1]
            parent = best.get("parent_id") if best.get("parent_id") in data.by_id else data.rows[0]["id"]
            a, b = parent, best["id"]
        return opts, opts, a, b

    @app.callback(Output("diff-body", "children"), Input("diff-a", "value"), Input("diff-b", "value"),
                  prevent_initial_call=True)
    @error
    def _diff(a, b):
        if not (a and b):
            return _note("Pick two kernels to compare.")
        ka, kb = source.kernel(a), source.kernel(b)
        if ka is None or kb is None:
            return _note("One of these kernels is no longer in the database.")
        return diff_table(ka, kb)
