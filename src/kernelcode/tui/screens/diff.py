"""DiffScreen: the current candidate side by side with the best kernel before it."""

from __future__ import annotations

import difflib

from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from kernelcode.tui.screens.overlay import Overlay

THEME = "monokai"
DEL_BG = "on #3d1418"
ADD_BG = "on #12361d"


def _highlighted_lines(code: str) -> list[Text]:
    """Syntax-highlight the whole file once (so multi-line strings colour right), then split."""
    text = Syntax(code, "python", theme=THEME, background_color="default").highlight(code)
    text.rstrip()
    return text.split("\n", allow_blank=True)


def side_by_side(old: str, new: str, old_title: str, new_title: str) -> Table:
    """A four-column table (line number, old, line number, new) aligned by difflib."""
    a, b = old.splitlines(), new.splitlines()
    ha, hb = _highlighted_lines(old), _highlighted_lines(new)
    table = Table(expand=True, box=None, padding=(0, 1), show_edge=False)
    table.add_column("", style="#6e7681", justify="right", width=4, no_wrap=True)
    table.add_column(old_title, ratio=1, no_wrap=True, overflow="crop")
    table.add_column("", style="#6e7681", justify="right", width=4, no_wrap=True)
    table.add_column(new_title, ratio=1, no_wrap=True, overflow="crop")
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for k in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + k, j1 + k
            left = ha[i].copy() if i < i2 and i < len(ha) else Text("")
            right = hb[j].copy() if j < j2 and j < len(hb) else Text("")
            if tag != "equal":
                left.stylize(DEL_BG)
                right.stylize(ADD_BG)
            table.add_row(str(i + 1) if i < i2 else "", left, str(j + 1) if j < j2 else "", right)
    return table


class DiffScreen(Overlay):
    """Kernel diff: ``k``. Shows the message instead when there is nothing to compare."""

    TITLE_TEXT = "Kernel diff"

    def __init__(self, old: str = "", new: str = "", old_title: str = "", new_title: str = "",
                 message: str = "") -> None:
        super().__init__()
        self.old, self.new, self.old_title, self.new_title = old, new, old_title, new_title
        self.message = message

    def compose_body(self) -> ComposeResult:
        if self.message:
            yield Static(self.message, classes="overlay-message")
        elif self.old == self.new:
            yield Static(f"{self.new_title} is identical to {self.old_title}.",
                         classes="overlay-message")
        else:
            yield Static(side_by_side(self.old, self.new, self.old_title, self.new_title),
                         id="diff")
