"""A benchmark suite (``/suite/<name>``): its problems' table and figures, as ``openkernel bench``
prints them (the numbers come from ``openkernel.bench.summary``, so both always agree), and
the suites section of the runs page.

Rendered as one block of escaped HTML (like the runs listing): a suite of 250 problems is
250 rows, cheaper as markup than as Dash components.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from dash import dcc, html

from kernelcode.dashboard.components import message_page
from kernelcode.dashboard.graph import STATUS_COLORS, UNKNOWN_COLOR
from openkernel.bench.summary import depth_text, own_split, problem_depth
from openkernel.wording import speedup_text

RUN_COLORS = {"completed": STATUS_COLORS["faster"], "failed": STATUS_COLORS["compile_error"],
              "running": STATUS_COLORS["correct"], "stopped": STATUS_COLORS["test_timeout"],
              "timed_out": STATUS_COLORS["build_timeout"]}
SUITES_ON_RUNS_PAGE = 20  # the newest; the others are one click away by URL


def suite_path(name: str) -> str:
    return f"/suite/{quote(name, safe='')}"


def _x(value: float | None) -> str:
    return speedup_text(value)


def _ms(value: float | None) -> str:
    return f"{value:.4g}" if value else "-"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def figures(summary) -> str:
    """The suite's one line of figures (HTML)."""
    fast = " ".join(f'<span class="fastp">fast<sub>{escape(k)}</sub> {v:.2f}</span>'
                    for k, v in summary.fast_p.items())
    return (f'<p class="suite-figures" id="suite-figures">{fast} &middot; geomean over eager '
            f"{_x(summary.geomean_eager)} ({summary.n_correct} correct of "
            f"{len(summary.problems)}) &middot; over torch.compile {_x(summary.geomean_compile)} "
            f"({summary.n_compile}: {summary.n_compile_faster} faster, {summary.n_compile_tie} "
            f"tie) &middot; over max-autotune {_x(summary.geomean_autotune)} "
            f"({summary.n_autotune}) &middot; over cudagraphs {_x(summary.geomean_cudagraphs)} "
            f"({summary.n_cudagraphs}) &middot; fixed cost median {_s(summary.fixed_s_median)} s "
            f"&middot; a candidate's own time median {_s(summary.candidate_s_median)} s"
            + (f" ({escape(own_split(summary))})" if own_split(summary) else "")
            + (f" &middot; {summary.n_timed_out} timed out" if summary.n_timed_out else "")
            + (f" &middot; {summary.started_anew} judged in workers started anew, not forked: "
               f"{escape(summary.fork_error)}" if summary.started_anew else "")
            + (f" &middot; depth: {escape(depth_text(summary))}" if depth_text(summary) else "")
            + f" &middot; {escape(summary.precision)}"
            + (f" &middot; library-bound {len(summary.library_bound)} (over torch.compile "
               f"{_x(summary.geomean_compile_library_bound)}, our own kernels)"
               if summary.library_bound else "") + "</p>")


def problems_table(summary) -> str:
    from kernelcode.dashboard.app import job_path

    head = "".join(f"<th>{h}</th>" for h in ("problem", "status", "correct", "speedup",
                                             "vs torch.compile", "vs max-autotune",
                                             "vs cudagraphs", "eager ms", "compile ms",
                                             "autotune ms", "cudagraphs ms", "by iteration",
                                             "judged", "evaluator faults", "time s", "fixed s",
                                             "own s", "note"))
    body = []
    for p in summary.problems:
        color = RUN_COLORS.get(p.status, UNKNOWN_COLOR)
        note = "; ".join(x for x in ("" if p.correct else (p.error.splitlines() or [""])[0][:160],
                                     f"library-bound ({p.library_bound}): our own kernel"
                                     if p.correct and p.library_bound else "",
                                     p.baseline_note, "replays a CUDA graph: like for like "
                                     "vs cudagraphs" if p.correct and p.cuda_graph else "",
                                     p.flagged_note) if x)
        cells = [f'<a class="job-link" href="{escape(job_path(p.name, summary.suite))}">{escape(p.name)}</a>',
                 f'<span class="badge" style="background-color:{color}">{escape(p.status)}</span>',
                 "yes" if p.correct else "no", _x(p.speedup), _x(p.over_compile),
                 _x(p.over_autotune), _x(p.over_cudagraphs), _ms(p.eager_ms), _ms(p.compile_ms),
                 _ms(p.autotune_ms), _ms(p.cudagraphs_ms), escape(problem_depth(p)),
                 str(p.candidates),
                 f'<span class="flag-bad">{p.evaluator_faults}</span>' if p.evaluator_faults else "0",
                 f"{p.time_s:.0f}",
                 _s(p.fixed_s) + (' <span class="small muted">stored</span>'
                                  if p.baselines_stored else ""), _s(p.candidate_s),
                 f'<span class="small muted">{escape(note)}</span>']
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f'<table class="runs" id="suite-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def layout(source, name: str):
    summary = source.suite(name)
    if summary is None:
        return message_page("Unknown suite", f"No benchmark suite named {name!r} in this database "
                            "(suites are written by openkernel bench).")
    curve = depth_figure(summary)
    return html.Div([
        dcc.Link("Back to all runs", href="/"),
        html.H2(f"Suite {name}"),
        dcc.Markdown(figures(summary), dangerously_allow_html=True),
        *([dcc.Graph(id="suite-depth", figure=curve, config={"displaylogo": False})]
          if curve is not None else []),
        dcc.Markdown(problems_table(summary), dangerously_allow_html=True),
    ], className="suite-page")


def depth_figure(summary):
    """The depth curve: the geomean of the best kernels so far after each iteration, over
    torch.compile and over eager (None for a suite of one iteration)."""
    if len(summary.depth) < 2:
        return None
    import plotly.graph_objects as go

    its = [d["iteration"] for d in summary.depth]
    fig = go.Figure()
    for key, name in (("geomean_compile", "over torch.compile"), ("geomean_eager", "over eager")):
        if any(d[key] for d in summary.depth):
            fig.add_trace(go.Scatter(x=its, y=[d[key] for d in summary.depth], name=name,
                                     mode="lines+markers", hovertemplate="after iteration %{x}: "
                                     "%{y:.3g}x<extra>" + name + "</extra>"))
    fig.update_layout(height=280, margin=dict(l=50, r=20, t=40, b=40),
                      title=f"best so far by iteration (geomean; rising on {summary.n_rising} of "
                            f"{summary.n_depth})", xaxis_title="iteration",
                      yaxis_title="speedup x", xaxis={"dtick": 1})
    return fig


def suites_section(source):
    """The runs page's list of suites, each with its figures and its jobs (None: no suite)."""
    suites = source.suites()[:SUITES_ON_RUNS_PAGE]
    if not suites:
        return None
    blocks = []
    for entry in suites:
        summary = source.suite(entry["suite"])
        if summary is None:
            continue
        href = escape(suite_path(entry["suite"]))
        blocks.append(
            f'<details class="suite"><summary><a class="suite-link" href="{href}">'
            f'{escape(entry["suite"])}</a> <span class="muted">{len(summary.problems)} problems, '
            f'{summary.n_correct} with a correct kernel, fast<sub>1</sub> {summary.fast_p["1"]:.2f}, '
            f'geomean {_x(summary.geomean_eager)} over eager, last filed {escape(entry["added"])}'
            f"</span></summary>{problems_table(summary)}</details>")
    return html.Div([html.H3("Benchmark suites"),
                     dcc.Markdown("".join(blocks), dangerously_allow_html=True)],
                    id="suites-section", className="suites")
