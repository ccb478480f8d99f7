"""ExperimentLog: a DataTable with one row per candidate, in the seed's status colours."""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.text import Text
from textual.widgets import DataTable

from kernelcode.tui.formatting import speedup_str, status_text
from kernelcode.tui.state import Candidate

# Fixed widths: auto-sized columns are re-measured for every new row, which costs a fast run.
COLUMNS = {"#": 4, "label": 8, "speedup": 8, "status": 13, "what it tried": 60}


class ExperimentLog(DataTable):
    """Every candidate of the run; Enter (or a click) on a row opens its detail.

    Any change to a DataTable makes it re-render all its visible rows on the next frame, the
    most expensive part of a frame. So changes are applied at most every FLUSH_INTERVAL_S: at
    once in a normal run, a few times a second under a fast stream.
    """

    FLUSH_INTERVAL_S = 0.5

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._pending: dict[str, Candidate] = {}
        self._last_flush = 0.0
        self._flush_scheduled = False

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for name, width in COLUMNS.items():
            self.add_column(name, key=name, width=width)

    def upsert_many(self, rows: Iterable[Candidate]) -> None:
        """Add or update rows: now, or with the next flush if the last one was very recent."""
        for row in rows:
            self._pending[row.label] = row
        if not self._pending or self._flush_scheduled:
            return
        wait = self._last_flush + self.FLUSH_INTERVAL_S - time.monotonic()
        if wait > 0:
            self._flush_scheduled = True
            self.set_timer(wait, self.flush)
        else:
            self.flush()

    def flush(self) -> None:
        """Apply the pending row changes."""
        self._flush_scheduled = False
        self._last_flush = time.monotonic()
        rows, self._pending = self._pending, {}
        for row in rows.values():
            self.upsert(row)

    def upsert(self, row: Candidate) -> None:
        """Add the candidate's row, or update it once the candidate has been judged."""
        speed = Text(speedup_str(row.speedup), justify="right")
        if row.mark == "keep":
            speed.stylize("bold")
        cells = (speed, status_text(row.status), row.description or row.model or "")
        if row.label in self.rows:
            for name, value in zip(list(COLUMNS)[2:], cells):
                self.update_cell(row.label, name, value)
        else:
            self.add_row(Text(str(self.row_count + 1), style="#8b949e"), row.label, *cells,
                         key=row.label)
