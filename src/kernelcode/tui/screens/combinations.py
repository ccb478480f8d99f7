"""The combination table of a templated candidate, for the candidate view (``o`` sorts it)."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from kernelcode.tui.formatting import STATUS_COLOURS, STATUS_WORDS, speedup_str
from openkernel.schemas import Status

# What ``o`` cycles through: (name, key, descending)
SORTS = (("speedup", "speedup", True), ("runtime", "runtime", False), ("parameters", "params", False))


def _order(rows: list[dict], sort: int) -> list[dict]:
    name, key, descending = SORTS[sort % len(SORTS)]
    if key == "params":
        return sorted(rows, key=lambda r: tuple(str(v) for v in r["params"].values()))
    if key == "runtime":  # failed combinations (no runtime) last
        return sorted(rows, key=lambda r: (r["runtime"] <= 0, r["runtime"]))
    return sorted(rows, key=lambda r: r["speedup"], reverse=descending)


def combination_table(results: dict, sort: int = 0) -> Table:
    """Every combination: its parameters, status, median runtime and speedup; ★ the winner."""
    rows = results.get("combinations", [])
    names = list((results.get("space") or {}) or (rows[0]["params"] if rows else {}))
    name = SORTS[sort % len(SORTS)][0]
    table = Table(title=f"{len(rows)} of {results.get('space_size', len(rows))} combinations"
                  + (" (a sample)" if results.get("sampled") else "") + f", by {name}",
                  title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("")
    for n in names:
        table.add_column(n, justify="right")
    table.add_column("status")
    table.add_column("median ms", justify="right")
    table.add_column("sweep x", justify="right")
    table.add_column("judged x", justify="right")  # the winner's full checks: the kernel's figure
    table.add_column("why it failed", overflow="fold", max_width=60)
    winner = results.get("winner")
    judged = results.get("winner_judged") or {}
    for row in _order(rows, sort):
        status = Status(row["status"]) if row["status"] in {s.value for s in Status} else None
        word = Text(STATUS_WORDS[status], style=STATUS_COLOURS[status]) if status else Text(row["status"])
        why = next((ln for ln in (row.get("error") or row.get("dropped") or "").splitlines()
                    if ln.strip()), "")  # a failure, or why screening dropped it
        won = row["params"] == winner
        table.add_row("★" if won else "",
                      *(str(row["params"].get(n, "")) for n in names), word,
                      f"{row['runtime']:.3g}" if row["runtime"] > 0 else "–",
                      speedup_str(row["speedup"]),
                      (speedup_str(judged["speedup"]) if judged["speedup"] > 0 else judged["status"])
                      if won and judged else "", why[:200])
    return table
