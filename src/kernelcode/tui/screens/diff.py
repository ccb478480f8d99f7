"""DiffView: the current candidate side by side with the best kernel before it."""

from __future__ import annotations

import difflib

from rich.syntax import Syntax
from rich.text import Text

from kernelcode.tui.screens.overlay import Block, Overlay, message

THEME = "monokai"
DEL_BG = "on #3d1418"
ADD_BG = "on #12361d"
NUM = "#6e7681"


def _highlighted_lines(code: str) -> list[Text]:
    """Syntax-highlight the whole file once (so multi-line strings colour right), then split."""
    text = Syntax(code, "python", theme=THEME, background_color="default").highlight(code)
    text.rstrip()
    return text.split("\n", allow_blank=True)


def _cell(line: Text | None, number: int | None, width: int, background: str) -> Text:
    """One side of a row: a line number and the code, cropped or padded to ``width``."""
    out = Text(f"{number:>4} " if number is not None else "     ", style=NUM)
    code = line.copy() if line is not None else Text("")
    code.truncate(width - 5, overflow="crop", pad=True)
    if background:
        code.stylize(background)
    return out + code


def side_by_side(old: str, new: str, old_title: str, new_title: str, width: int = 160) -> Text:
    """Both files aligned by difflib, in one Text: changed lines on red / green backgrounds.

    Plain Text lines rather than a Rich Table: a table is measured and rendered several times
    per frame, which made the overlay slow to open.
    """
    half = max((width - 3) // 2, 20)
    a, b = old.splitlines(), new.splitlines()
    ha, hb = _highlighted_lines(old), _highlighted_lines(new)
    rows = [Text.assemble((old_title[:half].ljust(half), "bold"), " │ ",
                          (new_title[:half], "bold"))]
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        for k in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + k, j1 + k
            left = _cell(ha[i] if i < i2 and i < len(ha) else None, i + 1 if i < i2 else None,
                         half, DEL_BG if tag != "equal" else "")
            right = _cell(hb[j] if j < j2 and j < len(hb) else None, j + 1 if j < j2 else None,
                          half, ADD_BG if tag != "equal" else "")
            rows.append(Text.assemble(left, (" │ ", NUM), right))
    return Text("\n").join(rows)


class DiffView(Overlay):
    """Kernel diff: ``k``. Shows the message instead when there is nothing to compare."""

    TITLE_TEXT = "Kernel diff"

    def __init__(self, old: str = "", new: str = "", old_title: str = "", new_title: str = "",
                 message: str = "") -> None:
        self.old, self.new, self.old_title, self.new_title = old, new, old_title, new_title
        self.message = message

    def blocks(self, width: int) -> list[Block]:
        if self.message:
            return [message(self.message)]
        if self.old == self.new:
            return [message(f"{self.new_title} is identical to {self.old_title}.")]
        return [Block(side_by_side(self.old, self.new, self.old_title, self.new_title,
                                   max(width - 2, 60)), lines=True)]
