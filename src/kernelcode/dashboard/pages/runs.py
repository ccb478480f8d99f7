"""The runs page: every (task_name, job_name) with counts, status mix, best speedup, hardware.

Paged (50 jobs) because the per-job figures are computed only for the jobs on screen: that
is what keeps the page under a second on a million kernels (see ``queries.list_jobs``).
"""

from __future__ import annotations

from dash import Input, Output, State, ctx, dcc, html

from kernelcode.dashboard.components import message_page
from kernelcode.dashboard.graph import STATUS_COLORS, STATUS_MEANINGS, UNKNOWN_COLOR

PAGE = 50


def layout() -> html.Div:
    """The static part of the page; the table is filled by ``register``'s callback."""
    return html.Div([
        html.H2("Runs"),
        html.Div([
            dcc.Input(id="runs-search", type="search", debounce=0.3, placeholder="find by task or job name",
                      className="search", autoFocus=True),
            html.Button("previous", id="runs-prev", n_clicks=0),
            html.Button("next", id="runs-next", n_clicks=0),
            html.Span(id="runs-count", className="muted"),
        ], className="toolbar"),
        dcc.Store(id="runs-offset", data=0),
        html.Div(id="runs-table"),
    ])


def status_bar(status: dict) -> html.Div:
    """A stacked bar of the status mix, coloured as the graph, with counts on hover."""
    total = sum(status.values()) or 1
    order = list(STATUS_COLORS) + sorted(set(status) - set(STATUS_COLORS))
    segments = [
        html.Span(className="seg", title=f"{name}: {status[name]} ({STATUS_MEANINGS.get(name, name)})",
                  style={"width": f"{100 * status[name] / total:.2f}%",
                         "backgroundColor": STATUS_COLORS.get(name, UNKNOWN_COLOR)})
        for name in order if status.get(name)
    ]
    return html.Div(segments, className="status-bar")


def runs_table(rows: list[dict]) -> html.Table:
    """The listing: one row per job, linking to its page."""
    from kernelcode.dashboard.app import job_path

    head = html.Tr([html.Th(h) for h in ("task", "job", "kernels", "status mix", "best speedup",
                                          "hardware", "runs", "last activity")])
    body = []
    for r in rows:
        best = f"{r['best_speedup']:.2f}x" if r["best_speedup"] > 0 else "-"
        mix = ", ".join(f"{n} {s}" for s, n in sorted(r["status"].items(), key=lambda kv: -kv[1]))
        body.append(html.Tr([
            html.Td(r["task_name"]),
            html.Td(dcc.Link(r["job_name"], href=job_path(r["task_name"], r["job_name"]), className="job-link")),
            html.Td(r["kernels"]),
            html.Td([status_bar(r["status"]), html.Div(mix, className="small muted")]),
            html.Td(best),
            html.Td(r["hardware"] or "-"),
            html.Td(f"{r['runs']}" + (" (running)" if r["running"] else "")),
            html.Td(r["last"]),
        ]))
    return html.Table([html.Thead(head), html.Tbody(body)], className="runs", id="runs-listing")


def register(app, source) -> None:
    """Callbacks of the runs page."""
    from kernelcode.dashboard.app import guarded

    @app.callback(Output("runs-offset", "data"), Input("runs-prev", "n_clicks"),
                  Input("runs-next", "n_clicks"), Input("runs-search", "value"),
                  State("runs-offset", "data"), prevent_initial_call=True)
    def _page(_prev, _next, _search, offset):
        if ctx.triggered_id == "runs-next":
            return (offset or 0) + PAGE
        if ctx.triggered_id == "runs-prev":
            return max(0, (offset or 0) - PAGE)
        return 0  # a new search starts at the first page

    @app.callback(Output("runs-table", "children"), Output("runs-count", "children"),
                  Input("runs-offset", "data"), State("runs-search", "value"))
    @guarded(lambda msg: (message_page("Cannot list the runs", msg, back=False), ""))
    def _table(offset, search):
        rows, total = source.jobs(search or "", offset or 0, PAGE)
        if total == 0:
            text = "No job matches this search." if search else \
                "This database has no runs yet. Start one with `openkernel` or kernel-code."
            return html.P(text, className="empty", id="runs-empty"), "0 jobs"
        first = min(offset or 0, total)
        return runs_table(rows), f"jobs {first + 1}-{first + len(rows)} of {total}"
