"""The page of one job: header, run health, the generation graph with the kernel panel, the
critic's lines, tabs.

The graph's elements come in a callback of their own right after the page (see ``layout``).
A ``dcc.Interval`` then asks only for the job's signature (count, newest kernel, critic
lines); the graph, the header, the critic section and the open panel are redrawn only when
it changed.
"""

from __future__ import annotations

from collections import Counter

import dash_cytoscape as cyto
from dash import ClientsideFunction, Input, Output, State, ctx, dcc, html, no_update
from dash.exceptions import PreventUpdate

from kernelcode.dashboard.components import kernel_panel, message_page
from kernelcode.dashboard.graph import (
    BEST_MEANING,
    EDGE_BUDGET,
    STATUS_COLORS,
    STATUS_MEANINGS,
    graph_elements,
    stylesheet,
)
from kernelcode.dashboard.health import branches_from_config, job_health
from kernelcode.dashboard.pages import panels
from kernelcode.dashboard.spend import models_table
from openkernel.wording import Tally, speedup_text

HINT = "Click a circle (or a row of the experiment table) to see everything recorded for that kernel."


def legend(n_kernels: int = 0) -> html.Div:
    """The seed's colour table, plus how to read size and arrows (and, for a large job, zoom)."""
    items = [html.Li([html.Span(className="dot", style={"backgroundColor": c}), f"{s}: {STATUS_MEANINGS[s]}"])
             for s, c in STATUS_COLORS.items()]
    items.append(html.Li([html.Span(className="dot best-dot"), BEST_MEANING]))
    items.append(html.Li([html.Span(className="dot external-dot"),
                          "Written by a person or an agent (label u<N> · its author)"]))
    items.append(html.Li("Bigger is faster; arrows point from parent to child; labels read i<N>-b<M>."))
    if n_kernels > EDGE_BUDGET:
        items.append(html.Li(f"Zoom in to see the arrows and labels: a job of over {EDGE_BUDGET:,} kernels "
                             "draws them only for the part in view.", id="graph-zoom-note"))
    return html.Ul(items, className="legend", id="graph-legend")


def backends(rows: list[dict], started: str) -> str:
    """The backend the candidates were written for, and where `b` switched it (issue 58: the
    header said "triton" for a job that went on in CUDA): "cuda (triton to i1, cuda from i2)"."""
    spans: list[tuple[str, int, int]] = []  # (backend, first iteration, last iteration)
    for r in rows:
        b = r.get("backend")
        if r.get("is_program0") or not b or r.get("iteration") is None:
            continue
        if spans and spans[-1][0] == b:
            spans[-1] = (b, spans[-1][1], r["iteration"])
        else:
            spans.append((b, r["iteration"], r["iteration"]))
    if len(spans) < 2:
        return spans[0][0] if spans else started
    told = [f"{b} to i{last}" if i == 0 else f"{b} from i{first}"
            for i, (b, first, last) in enumerate(spans)]
    return f"{spans[-1][0]} ({', '.join(told)})"


def header(data) -> list:
    """Title, run facts and a live badge."""
    runs = data.runs
    last = runs[-1] if runs else {}
    best = data.by_id.get(data.best_id) if data.best_id else None
    # the reference is no candidate; judged and not, in every view's words
    tally = Tally.of(Counter(r["status"] for r in data.rows if not r.get("is_program0")))
    facts = [tally.words(), f"{len(runs)} run(s)",
             f"hardware: {last.get('hardware') or '-'}",
             f"backend: {backends(data.rows, last.get('backend') or '-')}",
             f"generator: {last.get('generator') or '-'}",
             f"models: {', '.join(last.get('models') or []) or '-'}",
             f"best: {best['label']} {speedup_text(best['runtime_improvement'])}" if best and best.get(
                 "runtime_improvement", -1) > 0 else "best: -"]
    state = "running (refreshes by itself)" if data.running else data.state + (
        " (its engine stopped without finishing it; run the job again to resume)"
        if data.state == "interrupted" else "")
    if last.get("error") and not data.running:  # why it stopped or failed (a budget reached)
        state += f": {last['error']}"
    models = models_table(data.rows, data.calls)  # per model: calls, tokens, cost, results
    return [html.H2([data.task_name, " / ", data.job_name]),
            html.Div(" | ".join(facts), className="muted", id="job-facts"),
            html.Span(state, className="live" if data.running else "done", id="job-live"),
            *([models] if models is not None else [])]


def health_strip(data) -> html.Div:
    """The symptoms this job shows, one line each, with where to look."""
    config = data.runs[-1].get("config") if data.runs else None
    warns = [c for c in job_health(data.rows, branches_from_config(config)) if c.state == "warn"]
    if not warns:
        return html.Div("Run health: none of the usual symptoms.", className="health-ok", id="health-strip")
    return html.Div([html.Strong("Run health: ")] + [
        html.Div(f"{c.symptom}: {c.evidence}. Likely: {c.cause}. Look at: {c.where}.", className="health-warn")
        for c in warns], id="health-strip")


CRITIC_EMPTY = ("No critic lines stored for this job yet: the critic writes one after each "
                "iteration (a database written before they were stored has none).")


def critic_section(data) -> list:
    """The critic's diagnosis after each iteration, newest last (the box opens at the bottom)."""
    head = [html.H3("Critic"), html.Div("What limits the best kernel after each iteration, and what "
                                        "to try next.", className="muted small")]
    if not data.critiques:
        return head + [html.P(CRITIC_EMPTY, className="note", id="critic-empty")]
    rows = [html.Tr([html.Td(f"i{c['iteration']}", className="critic-iter"), html.Td(c["text"])],
                    title=f"{c['source']} critic, run {c['run_id']}, {c['created_at']}")
            for c in data.critiques]
    table = html.Table([html.Thead(html.Tr([html.Th("iteration"), html.Th("diagnosis")])),
                        html.Tbody(rows)], className="critic", id="critic-table")
    return head + [html.Div(table, className="critic-scroll")]


def layout(source, task: str, job: str):
    """The page, or a clear message for an unknown job."""
    data = source.job(task, job)
    if data is None:
        return message_page("Unknown job", f"No job named {job!r} of task {task!r} in this database. "
                            "Pick one from the list of runs.")
    return html.Div([
        dcc.Store(id="job-key", data={"task": task, "job": job}),
        dcc.Store(id="job-sig", data=list(data.signature)),
        dcc.Store(id="selected-kernel", data=None),
        dcc.Interval(id="job-tick", interval=source_refresh(source), n_intervals=0),
        html.Div(header(data), id="job-header"),
        html.Div(health_strip(data), id="job-health"),
        html.Div([
            html.Div([
                legend(len(data.rows)),
                # elements arrive through _refresh into graph-elements, and assets/graph.js puts
                # them into cytoscape in one batch: neither the page layout (Dash's renderer walks
                # every layout object it receives) nor the component's elements prop (diffed,
                # then copied back into Dash element by element) carries them.
                dcc.Store(id="graph-elements"),
                dcc.Store(id="graph-drawn"),
                cyto.Cytoscape(id="job-graph", elements=[], layout={"name": "preset", "fit": False},
                               stylesheet=stylesheet(), autoRefreshLayout=False, minZoom=0.001,
                               maxZoom=4, boxSelectionEnabled=False,
                               style={"width": "100%", "height": "640px"}, className="graph"),
            ], className="graph-col"),
            html.Div(html.P(HINT, className="muted"), id="kernel-detail", className="detail-col"),
        ], className="graph-row"),
        html.Div(critic_section(data), id="job-critic", className="critic-section"),
        panels.tabs(source, data),
    ], className="job-page")


def source_refresh(source) -> int:
    """The refresh interval registered for this source (ms)."""
    return getattr(source, "refresh_ms", 2000)


def register(app, source, refresh_ms: int) -> None:
    """Callbacks of the job page (the tab panels register in ``panels``)."""
    from kernelcode.dashboard.app import guarded

    source.refresh_ms = refresh_ms

    @app.callback(Output("job-sig", "data"), Input("job-tick", "n_intervals"),
                  State("job-key", "data"), State("job-sig", "data"), prevent_initial_call=True)
    @guarded(lambda msg: no_update)  # a busy or vanished database: keep what is on screen
    def _tick(_n, key, sig):
        new = list(source.signature(key["task"], key["job"]))
        if new == list(sig or []):
            raise PreventUpdate
        return new

    # The first call fills the graph (assets/graph.js fits it once); live refreshes patch it in
    # place, keeping the user's zoom and pan, and redraw the header, health strip and critic.
    @app.callback(Output("graph-elements", "data"), Output("job-header", "children"),
                  Output("job-health", "children"), Output("job-critic", "children"),
                  Input("job-sig", "data"), State("job-key", "data"))
    @guarded(lambda msg: (no_update, no_update, html.Div(msg, className="error"), no_update))
    def _refresh(sig, key):
        data = source.job(key["task"], key["job"], tuple(sig))
        if data is None:
            raise PreventUpdate
        elements = graph_elements(data.rows, data.best_id)
        if ctx.triggered_id is None:  # first call: header, health and critic are in the layout
            return elements, no_update, no_update, no_update
        return elements, header(data), health_strip(data), critic_section(data)

    app.clientside_callback(ClientsideFunction("kernelgraph", "draw"), Output("graph-drawn", "data"),
                            Input("graph-elements", "data"), State("job-graph", "id"))

    @app.callback(Output("selected-kernel", "data"), Input("job-graph", "tapNodeData"),
                  Input("exp-grid", "cellClicked"), prevent_initial_call=True)
    def _select(node, cell):
        if ctx.triggered_id == "job-graph" and node:
            return node.get("id")
        if ctx.triggered_id == "exp-grid" and cell and cell.get("rowId"):
            return cell["rowId"]
        raise PreventUpdate

    @app.callback(Output("kernel-detail", "children"), Input("selected-kernel", "data"),
                  prevent_initial_call=True)
    @guarded(lambda msg: html.Div(msg, className="error"))
    def _detail(kernel_id):
        if not kernel_id:
            raise PreventUpdate
        kernel = source.kernel(kernel_id)
        if kernel is None:
            return message_page("Unknown kernel", f"No kernel with id {kernel_id!r} in this database.", back=False)
        return kernel_panel(kernel)

    panels.register(app, source)
