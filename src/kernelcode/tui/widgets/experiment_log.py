"""ExperimentLog: a DataTable with one row per candidate, in the seed's status colours."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from kernelcode.tui.formatting import speedup_str, status_text
from kernelcode.tui.state import Candidate

COLUMNS = ("#", "label", "speedup", "status", "what it tried")


class ExperimentLog(DataTable):
    """Every candidate of the run; Enter (or a click) on a row opens its detail."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for name in COLUMNS:
            self.add_column(name, key=name)

    def upsert(self, row: Candidate) -> None:
        """Add the candidate's row, or update it once the candidate has been judged."""
        speed = Text(speedup_str(row.speedup), justify="right")
        if row.mark == "keep":
            speed.stylize("bold")
        cells = (speed, status_text(row.status), row.description or row.model or "")
        if row.label in self.rows:
            for name, value in zip(COLUMNS[2:], cells):
                self.update_cell(row.label, name, value)
        else:
            self.add_row(Text(str(self.row_count + 1), style="#8b949e"), row.label, *cells,
                         key=row.label)
