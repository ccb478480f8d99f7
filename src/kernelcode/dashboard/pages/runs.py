"""The runs page: every (task_name, job_name) with counts, status mix, best speedup, hardware.

Paged (50 jobs) because the per-job figures are computed only for the jobs on screen: that
is what keeps the query under a second on a million kernels (see ``queries.list_jobs``). Counts
and the best kernel are of candidates (never the reference), as `openkernel runs` says them.
The listing is one block of escaped HTML in a single ``dcc.Markdown`` rather than hundreds of
Dash components: the browser-side cost of a Dash component, not the query, was what made
this page slow. The first page comes with the layout itself (no second round trip).
"""

from __future__ import annotations

from html import escape

from dash import Input, Output, State, ctx, dcc, html

from kernelcode.dashboard.components import message_page
from kernelcode.dashboard.graph import STATUS_COLORS, STATUS_MEANINGS, UNKNOWN_COLOR
from openkernel.wording import Tally, speedup_text

PAGE = 50


def layout(source) -> html.Div:
    """The page with its first page of jobs already filled in."""
    from kernelcode.dashboard.pages.suite import suites_section

    table, count = listing(source, "", 0)
    suites = suites_section(source)
    return html.Div([
        *([suites] if suites is not None else []),
        html.H2("Runs"),
        html.Div([
            dcc.Input(id="runs-search", type="search", debounce=0.3, placeholder="find by task or job name",
                      className="search", autoFocus=True),
            html.Button("previous", id="runs-prev", n_clicks=0),
            html.Button("next", id="runs-next", n_clicks=0),
            html.Span(count, id="runs-count", className="muted"),
        ], className="toolbar"),
        dcc.Store(id="runs-offset", data=0),
        html.Div(table, id="runs-table"),
    ])


def status_bar(status: dict) -> str:
    """A stacked bar of the status mix (HTML), coloured as the graph, counts on hover."""
    total = sum(status.values()) or 1
    order = list(STATUS_COLORS) + sorted(set(status) - set(STATUS_COLORS))
    segs = "".join(
        f'<span class="seg" title="{escape(f"{s}: {status[s]} ({STATUS_MEANINGS.get(s, s)})")}" '
        f'style="width:{100 * status[s] / total:.2f}%;background-color:{STATUS_COLORS.get(s, UNKNOWN_COLOR)}"></span>'
        for s in order if status.get(s))
    return f'<div class="status-bar">{segs}</div>'


def runs_table(rows: list[dict]) -> dcc.Markdown:
    """The listing as one HTML table (every value escaped), each job linking to its page."""
    from kernelcode.dashboard.app import job_path

    head = "".join(f"<th>{h}</th>" for h in ("task", "job", "candidates", "status mix", "best speedup",
                                             "hardware", "runs", "state", "last activity"))
    body = []
    for r in rows:
        best = f"{speedup_text(r['best_speedup'])} ({escape(r['best_label'])})" if r["best_speedup"] > 0 else "-"
        mix = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in
                        sorted(r["status"].items(), key=lambda kv: -kv[1]))
        href = escape(job_path(r["task_name"], r["job_name"]))
        cells = [escape(r["task_name"]), f'<a class="job-link" href="{href}">{escape(r["job_name"])}</a>',
                 escape(Tally.of(r["status"]).words(noun=False)), status_bar(r["status"]) + f'<div class="small muted">{escape(mix)}</div>',
                 best, escape(r["hardware"] or "-"), str(r["runs"]),
                 f'<span class="state-{escape(r["state"])}">{escape(r["state"])}</span>',
                 escape(r["last"])]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    html_text = (f'<table class="runs" id="runs-listing"><thead><tr>{head}</tr></thead>'
                 f'<tbody>{"".join(body)}</tbody></table>')
    return dcc.Markdown(html_text, dangerously_allow_html=True)


def listing(source, search: str, offset: int):
    """``(table or message, "jobs a-b of n")`` for one page of the search."""
    rows, total = source.jobs(search or "", offset or 0, PAGE)
    if total and not rows:  # "next" past the end: show the last page
        offset = (total - 1) // PAGE * PAGE
        rows, total = source.jobs(search or "", offset, PAGE)
    if total == 0:
        text = "No job matches this search." if search else \
            "This database has no runs yet. Start one with `openkernel` or kernel-code."
        return html.P(text, className="empty", id="runs-empty"), "0 jobs"
    first = min(offset or 0, total)
    return runs_table(rows), f"jobs {first + 1}-{first + len(rows)} of {total}"


def register(app, source) -> None:
    """Callbacks of the runs page: search and paging (the first page comes with the layout)."""
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
                  Input("runs-offset", "data"), State("runs-search", "value"), prevent_initial_call=True)
    @guarded(lambda msg: (message_page("Cannot list the runs", msg, back=False), ""))
    def _table(offset, search):
        return listing(source, search or "", offset or 0)
