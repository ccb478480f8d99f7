"""The job page's per-model table: which model of an ensemble earns its cost.

Per model: its calls (candidates' generations, log summaries, critic rounds), tokens in and
out, cost (with "unknown" where a price was not known), and what its candidates came to:
how many, how many correct, how many faster, the best speedup, and the cost per correct one.
"""

from __future__ import annotations

from dash import html

from openkernel.costs import format_tokens, format_usd
from openkernel.wording import speedup_text


def per_model(rows: list[dict], calls: list[dict] | None) -> list[dict]:
    """One dict per model, most calls first (pure: the tests call it directly)."""
    models: dict[str, dict] = {}

    def entry(name: str) -> dict:
        return models.setdefault(name, {
            "model": name, "calls": 0, "critic_calls": 0, "prompt_tokens": 0,
            "completion_tokens": 0, "cost_usd": 0.0, "unpriced": 0, "candidates": 0,
            "correct": 0, "faster": 0, "best_speedup": -1.0, "recorded": calls is not None})

    for c in calls or []:
        e = entry(c["model"])
        e["calls"] += c["calls"]
        e["critic_calls"] += c["calls"] if c["purpose"] == "critic" else 0
        e["prompt_tokens"] += c["prompt_tokens"]
        e["completion_tokens"] += c["completion_tokens"]
        e["cost_usd"] += c["cost_usd"]
        e["unpriced"] += c["unpriced"]
    for r in rows:
        if r.get("is_program0") or r.get("origin") != "llm":
            continue  # the reference, starting kernels and offline candidates
        e = entry(r.get("model") or "")
        e["candidates"] += 1
        if calls is None:  # an older database: what the kernels recorded
            llm = (r.get("meta") or {}).get("llm") or {}
            e["prompt_tokens"] += llm.get("prompt_tokens", 0)
            e["completion_tokens"] += llm.get("completion_tokens", 0)
        if r.get("status") in ("faster", "correct"):
            e["correct"] += 1
            e["best_speedup"] = max(e["best_speedup"], r.get("runtime_improvement") or -1.0)
        e["faster"] += r.get("status") == "faster"
    return sorted(models.values(), key=lambda e: (-e["calls"], -e["candidates"], e["model"]))


def _cost(e: dict) -> str:
    text = format_usd(e["cost_usd"])
    if e["unpriced"]:
        text += " + unknown" if e["cost_usd"] else " (unknown)"
    return text


def models_table(rows: list[dict], calls: list[dict] | None) -> html.Div | None:
    """The table, or None for a job that called no model."""
    table = per_model(rows, calls)
    if not any(e["calls"] or e["prompt_tokens"] for e in table):
        return None
    head = html.Tr([html.Th(h) for h in ("model", "calls", "tokens in", "tokens out", "cost",
                                         "candidates", "correct", "faster", "best",
                                         "cost per correct")])
    body = []
    for e in table:
        per_correct = (format_usd(e["cost_usd"] / e["correct"])
                       if e["correct"] and not e["unpriced"] else "-")
        calls_text = str(e["calls"]) if e["recorded"] else "not recorded"
        if e["critic_calls"]:
            calls_text += f" ({e['critic_calls']} critic)"
        body.append(html.Tr([
            html.Td(e["model"]), html.Td(calls_text), html.Td(format_tokens(e["prompt_tokens"])),
            html.Td(format_tokens(e["completion_tokens"])), html.Td(_cost(e)),
            html.Td(str(e["candidates"])), html.Td(str(e["correct"])), html.Td(str(e["faster"])),
            html.Td(speedup_text(e["best_speedup"])),
            html.Td(per_correct)]))
    total = sum(e["cost_usd"] for e in table)
    unknown = sum(e["unpriced"] for e in table)
    note = (f"Job total: {format_tokens(sum(e['prompt_tokens'] + e['completion_tokens'] for e in table))}"
            f" tokens, {format_usd(total)}" + (f" + {unknown} calls at an unknown price (counted "
                                               "$0; set a local price in the config)" if unknown else ""))
    return html.Div([html.H3("Models"), html.Table([html.Thead(head), html.Tbody(body)],
                                                   className="models", id="models-table"),
                     html.Div(note, className="muted small", id="models-total")],
                    className="models-section")
