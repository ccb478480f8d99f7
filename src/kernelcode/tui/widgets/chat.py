"""ChatPanel: what the generator and critic say, each outcome, the answers being written
(``StreamView``), and the steering input."""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, RichLog

from kernelcode.tui.widgets.streams import StreamView


STEER_PLACEHOLDER = "Steer the search… (/ to type, Enter to send)"

class ChatPanel(Vertical):
    """A scrolling log of the run in words, with an input line for steering at the bottom."""

    # Bounded so an all-night run does not grow the app without end (each line is a drawn strip
    # the garbage collector walks); the database keeps all.
    MAX_LINES = 1000

    # Lines kept from one burst of events: more than a screenful cannot be read as it flies by,
    # and writing them all would starve the key presses (every candidate stays in the table).
    BURST_LINES = 40

    # Each write wraps its lines and scrolls (repaints) the whole log, so lines said in quick
    # succession are written at most this often, as one burst. (The app queues the engine's
    # lines and flushes them with its other panels.)
    WRITE_INTERVAL_S = 0.25

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._pending: list[Text] = []
        self._skipped = 0
        self._last_write = 0.0
        self._write_scheduled = False

    def compose(self) -> ComposeResult:
        yield RichLog(id="chat-log", wrap=True, markup=False, max_lines=self.MAX_LINES,
                      min_width=20)
        yield StreamView(id="streams")
        yield Input(id="steer", placeholder=STEER_PLACEHOLDER)

    @property
    def pending(self) -> bool:
        """True while lines wait for the next write (tests wait for them)."""
        return bool(self._pending) or self._write_scheduled

    def queue(self, lines: Iterable[Text]) -> None:
        """Hold lines for the next write (``flush``), keeping only the newest of a burst."""
        self._pending.extend(lines)
        if len(self._pending) > self.BURST_LINES:  # keep only the newest: O(burst) memory
            self._skipped += len(self._pending) - self.BURST_LINES
            del self._pending[:-self.BURST_LINES]

    def flush(self) -> None:
        """Write the lines held, if any (one write is one render)."""
        if self._pending:
            self._write()

    def say(self, lines: Iterable[Text], now: bool = False) -> None:
        """Append lines to the chat: at once if the last write is not very recent (or ``now``,
        for the answer to a key), else with the next write."""
        self.queue(lines)
        if not self._pending or (self._write_scheduled and not now):
            return
        wait = self._last_write + self.WRITE_INTERVAL_S - time.monotonic()
        if wait > 0 and not now:
            self._write_scheduled = True
            self.set_timer(wait, self._write)
        else:
            self._write()

    def _write(self) -> None:
        self._write_scheduled = False
        self._last_write = time.monotonic()
        lines, self._pending = self._pending, []
        if self._skipped:
            note = Text(f"… {self._skipped} lines of a fast burst skipped (the Experiment Log "
                        "and the database have every candidate)", style="#8b949e italic")
            lines.insert(0, note)
            self._skipped = 0
        log = self.query_one(RichLog)
        # A no_wrap line (a judged answer's reasoning) is written on its own so it stays one
        # line, cut with an ellipsis at the log's width; the others go together, wrapped.
        group: list[Text] = []
        for line in lines + [None]:
            if line is not None and not line.no_wrap:
                group.append(line)
                continue
            if group:
                log.write(Text("\n").join(group))
                group = []
            if line is not None:
                log.write(line)
