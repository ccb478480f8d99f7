"""ChatPanel: what the generator and critic say, each outcome, and the steering input."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, RichLog


class ChatPanel(Vertical):
    """A scrolling log of the run in words, with an input line for steering at the bottom."""

    # Bounded so an all-night run does not grow the app without end; the database keeps all.
    MAX_LINES = 2000

    def compose(self) -> ComposeResult:
        yield RichLog(id="chat-log", wrap=True, markup=False, max_lines=self.MAX_LINES,
                      min_width=20)
        yield Input(id="steer", placeholder="Steer the search… (/ to type, Enter to send)")

    # Lines kept from one burst of events: more than a screenful cannot be read as it flies by,
    # and writing them all would starve the key presses (every candidate stays in the table).
    BURST_LINES = 60

    def say(self, lines: Iterable[Text]) -> None:
        """Append lines to the chat, as one write (one render) per call."""
        lines = list(lines)
        if not lines:
            return
        skipped = len(lines) - self.BURST_LINES
        if skipped > 0:
            note = Text(f"… {skipped} lines of a fast burst skipped (the Experiment Log and the "
                        "database have every candidate)", style="#8b949e italic")
            lines = [note, *lines[-self.BURST_LINES:]]
        self.query_one(RichLog).write(Text("\n").join(lines))
