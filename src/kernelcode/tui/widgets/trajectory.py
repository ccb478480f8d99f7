"""TrajectoryPanel: best speedup after each judged candidate, with keep/discard/error marks
(and "not judged" for candidates nothing was learnt from: not run here, an evaluator fault,
no kernel generated)."""

from __future__ import annotations

from functools import lru_cache

from rich.style import Style
from rich.text import Text

from kernelcode.tui.formatting import STATUS_COLOURS, label_of, speedup_str
from kernelcode.tui.state import RunState
from kernelcode.tui.widgets.lines import TextLines

BARS = "▁▂▃▄▅▆▇█"
MARKS = {"keep": ("↑", "#3fb950"), "discard": ("·", "#8b949e"), "error": ("×", "#f85149"),
         "not_judged": ("∅", "#6e7681")}


class TrajectoryPanel(TextLines):
    """A sparkline drawn with block characters, one column group per candidate.

    Hand-drawn rather than Textual's Sparkline because the marks under each bar must line up
    with their candidate, and Sparkline buckets its data to the width.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._state: RunState | None = None
        self._drawn = -1  # candidates drawn: redraw only when that changes

    def show(self, state: RunState) -> None:
        """Redraw from the run's state (called once per batch of events)."""
        if state is not self._state or len(state.evaluated) != self._drawn:
            self._state, self._drawn = state, len(state.evaluated)
            self.refresh()

    def render(self) -> Text:
        state = self._state
        if state is None or not state.evaluated:
            return Text("No candidate judged yet.", style="#8b949e")
        width = max(self.size.width, 10)
        rows = state.evaluated[-width:]
        values = state.trajectory[-len(rows):]
        col = max(1, min(3, width // len(rows)))
        # Scale between the lowest and highest best-so-far, so that steps of 0.1x still show.
        low, top = min(values), max(values)
        span = (top - low) or 1.0
        bars, marks = [], []
        for row, value in zip(rows, values):
            level = BARS[round((value - low) / span * (len(BARS) - 1))]
            bars.append((level * col, "#3fb950" if value > 1 else "#58a6ff"))
            glyph, colour = MARKS[row.mark]
            if row.mark in ("error", "not_judged") and row.status is not None:
                colour = STATUS_COLOURS[row.status]
            marks.append((glyph.ljust(col), colour))
        counts = state.marks
        best = f"({label_of(state.best)})" if state.best is not None else "(none correct yet)"
        summary = Text.assemble(
            ("best ", "#8b949e"), (speedup_str(state.best_speedup), "bold"),
            (f" {best}  ", "#8b949e"),
            (f"↑keep {counts['keep']}  ", "#3fb950"), (f"·discard {counts['discard']}  ", "#8b949e"),
            (f"×error {counts['error']}", "#f85149"))
        if counts["not_judged"]:  # not run here, evaluator faults, no kernel: not errors
            summary.append(f"  ∅not judged {counts['not_judged']}", "#8b949e")
        return Text("\n").join([_runs(bars), _runs(marks), summary])


@lru_cache(maxsize=64)
def _style(colour: str) -> Style:
    return Style.parse(colour)


def _runs(pieces: list[tuple[str, str]]) -> Text:
    """One span per run of equal colours (a span per candidate is slow to draw)."""
    text, chunk, colour = Text(), [], None
    for piece, piece_colour in pieces:
        if piece_colour != colour and chunk:
            text.append("".join(chunk), _style(colour))
            chunk = []
        chunk.append(piece)
        colour = piece_colour
    if chunk:
        text.append("".join(chunk), _style(colour))
    return text
