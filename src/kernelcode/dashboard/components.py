"""Dash components shared by the pages: messages, highlighted code, the kernel detail panel.

Code is rendered through ``dcc.Markdown`` fenced blocks: Dash ships highlight.js with its core
components and serves it itself, so highlighting works with no network.
"""

from __future__ import annotations

import difflib
import json

from dash import dcc, html

from kernelcode.dashboard.combinations import combinations_section
from kernelcode.dashboard.graph import STATUS_COLORS, STATUS_MEANINGS, UNKNOWN_COLOR
from openkernel.costs import format_usd
from openkernel.wording import flagged_why

_FENCE_LANG = {"python": "python", "triton": "python", "cuda": "cpp", "cpp": "cpp", "c++": "cpp"}


def message_page(title: str, text: str, back: bool = True) -> html.Div:
    """A clear, friendly page for bad input (no stack trace ever reaches the browser)."""
    children = [html.H2(title), html.P(text, className="message-text")]
    if back:
        children.append(dcc.Link("Back to all runs", href="/"))
    return html.Div(children, className="message-page", id="message-page")


def code_block(code: str, language: str = "python", empty: str = "(empty)") -> dcc.Markdown | html.Em:
    """Syntax-highlighted code; the fence grows past any backticks inside the code."""
    if not code:
        return html.Em(empty)
    fence = "```"
    while fence in code:
        fence += "`"
    lang = _FENCE_LANG.get((language or "").lower(), language or "")
    return dcc.Markdown(f"{fence}{lang}\n{code}\n{fence}", className="code")


def status_badge(status: str) -> html.Span:
    """A coloured pill with the status and its meaning from the seed's table."""
    return html.Span(status, title=STATUS_MEANINGS.get(status, status), className="badge",
                     style={"backgroundColor": STATUS_COLORS.get(status, UNKNOWN_COLOR)})


def _fmt(value, digits: int = 4, suffix: str = "") -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, (int, float)):
        return "-" if value < 0 else f"{value:.{digits}g}{suffix}"
    return str(value) or "-"


def _table(pairs: list[tuple[str, object]], test_id: str) -> html.Table:
    return html.Table([html.Tr([html.Th(k), html.Td(v)]) for k, v in pairs], className="kv", id=test_id)


def runtime_pairs(k: dict) -> list[tuple[str, object]]:
    """Runtime stats rows: benchmark statistics, trials, both speedups (seed: Runtime stats)."""
    st = k.get("runtime_stats") or {}
    meta = k.get("meta") or {}
    return [
        ("median (ms)", _fmt(st.get("median", k.get("runtime")))),
        ("mean (ms)", _fmt(st.get("mean"))),
        ("std (ms)", _fmt(st.get("std"))),
        ("min / max (ms)", f"{_fmt(st.get('min'))} / {_fmt(st.get('max'))}"),
        ("cv", _fmt(st.get("cv"), 3)),
        ("n_trials", _fmt(st.get("n_trials"))),
        ("reference median (ms)", _fmt((st.get("reference") or {}).get("median"))),
        ("speedup vs reference", _fmt(k.get("runtime_improvement"), 4, "x")),
        ("speedup vs torch.compile", _fmt(k.get("improve_over_compile"), 4, "x")),
        ("timing method", meta.get("timing_method") or "-"),
    ]


def _no_code(meta: dict) -> str:
    if meta.get("generation_failed") == "service":
        return "(empty: the model's service answered with an error; see the generation log)"
    return "(empty: extraction found no fenced code block)"


def kernel_panel(k: dict, heading: bool = True) -> html.Div:
    """Everything recorded for one kernel, in the seed's order of fields.

    Args:
        k: a row from ``queries.kernel_detail``.
        heading: show the label and a link to the kernel's own page.
    """
    meta = k.get("meta") or {}
    info = [
        ("task", k.get("task_name")), ("job", k.get("job_name")), ("label", k.get("label")),
        ("iteration", k.get("iteration")), ("branch", k.get("branch")),
        ("status", status_badge(k.get("status") or "")), ("model", k.get("model") or "-"),
        ("hardware", k.get("hardware") or "-"), ("gpu arch", k.get("gpu_arch") or "-"),
        ("backend / language", f"{k.get('backend')} / {k.get('language')}"),
        ("origin", k.get("origin")), ("author", k.get("author") or "-"),
        ("parent", k.get("parent_id") or "-"),
        ("inspirations", ", ".join(k.get("inspiration_ids") or []) or "-"),
        ("tokens / generation s / evaluation s",
         f"{k.get('tokens_used')} / {_fmt(k.get('generation_s'), 3)} / {_fmt(k.get('evaluation_s'), 3)}"),
        ("created", str(k.get("created_at") or "")[:19]), ("kernel id", k.get("id")),
    ]
    llm = meta.get("llm") or {}
    if llm.get("calls"):  # what its model calls used (README: Costs and budgets)
        cost = format_usd(llm.get("cost_usd", 0.0)) + (" (price unknown)"
                                                       if llm.get("price") == "unknown" else "")
        info.insert(-2, ("model calls / tokens in / out / cost",
                         f"{llm['calls']} / {llm.get('prompt_tokens', 0):,} / "
                         f"{llm.get('completion_tokens', 0):,} / {cost}"))
    violation, flagged = meta.get("integrity_violation"), meta.get("flagged_for_review")
    integrity = html.Div(
        [html.Strong("Integrity: "),
         html.Span(f"violation: {violation}" if violation else "no violation",
                   className="flag-bad" if violation else "flag-ok"),
         html.Span(f" | flagged for review: {flagged_why(meta)}" if flagged else " | not flagged",
                   className="flag-bad" if flagged else "flag-ok")], id="kernel-integrity")
    lang = k.get("language") or "python"
    sections = [
        ("Prompt", html.Pre(k.get("prompt") or "(no prompt: not generated by a model)", className="text")),
        ("Input code (reference)", code_block(k.get("reference_code") or "", "python")),
        ("Answer", dcc.Markdown(k.get("answer") or "*(no answer recorded)*", className="answer")),
        ("Output code", code_block(k.get("code") or "", lang, _no_code(meta))),
        ("Evaluation log", html.Pre(k.get("eval_log") or "(empty)", className="text")),
        ("Generation log", html.Pre(k.get("generation_log") or "(empty)", className="text")),
        ("Profiler data", html.Pre(json.dumps(k.get("profiler_data") or {}, indent=1, default=str)[:20000],
                                   className="text")),
        ("Metadata", html.Pre(json.dumps(meta, indent=1, default=str)[:20000], className="text")),
    ]
    head = []
    if heading:
        head = [html.H3([k.get("label") or k.get("id"), " ", status_badge(k.get("status") or "")]),
                dcc.Link("open on its own page", href=f"/kernel/{k.get('id')}")]
    if k.get("description"):
        head.append(html.P(k["description"], className="description"))
    body = [html.H4("Kernel info"), _table(info, "kernel-info"), integrity,
            html.H4("Runtime stats"), _table(runtime_pairs(k), "kernel-runtime")]
    combinations = combinations_section(k)
    if combinations is not None:
        body.append(combinations)
    for title, content in sections:
        body.append(html.Details([html.Summary(title), content], open=title in ("Output code", "Evaluation log")))
    return html.Div(head + body, className="kernel-panel", id="kernel-panel-body")


def diff_table(a: dict, b: dict) -> html.Div:
    """Side-by-side diff of two kernels' code (difflib), headed by their runtimes.

    Args:
        a, b: rows with ``label``, ``code``, ``runtime``, ``runtime_improvement``, ``status``.
    """
    left, right = (a.get("code") or "").splitlines(), (b.get("code") or "").splitlines()
    rows = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, left, right, autojunk=False).get_opcodes():
        for n in range(max(i2 - i1, j2 - j1)):
            li, rj = i1 + n, j1 + n
            lt = left[li] if li < i2 else ""
            rt = right[rj] if rj < j2 else ""
            rows.append(html.Tr([
                html.Td(str(li + 1) if li < i2 else "", className="ln"),
                html.Td(lt, className=f"code-cell {tag if li < i2 else 'blank'}-l"),
                html.Td(str(rj + 1) if rj < j2 else "", className="ln"),
                html.Td(rt, className=f"code-cell {tag if rj < j2 else 'blank'}-r"),
            ]))
    head = html.Tr([html.Th(_diff_title(a), colSpan=2), html.Th(_diff_title(b), colSpan=2)])
    changed = sum(1 for r in rows if "equal" not in r.children[1].className)
    return html.Div([html.P(f"{changed} changed line(s)"),
                     html.Table([html.Thead(head), html.Tbody(rows)], className="diff", id="diff-table")])


def _diff_title(k: dict) -> str:
    return (f"{k.get('label')} [{k.get('status')}]: median {_fmt(k.get('runtime'))} ms, "
            f"speedup {_fmt(k.get('runtime_improvement'), 4, 'x')}")
