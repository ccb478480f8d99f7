"""SkillsView: the offline templates and strategies that match this task."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from kernelcode.tui.screens.overlay import Block, Overlay, message, note


def skills_table(matches: list[dict]) -> Table:
    """One row per match; columns are the keys the matches carry, in their first order."""
    columns: list[str] = []
    for match in matches:
        columns += [k for k in match if k not in columns]
    table = Table(box=None, padding=(0, 2), show_edge=False, expand=True)
    for name in columns:
        table.add_column(name.replace("_", " "), overflow="fold")
    for match in matches:
        table.add_row(*(Text(_cell(match.get(name))) for name in columns))
    return table


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


class SkillsView(Overlay):
    """Skill library: ``s``."""

    TITLE_TEXT = "Skill library"

    def __init__(self, matches: list[dict], note: str = "") -> None:
        self.matches, self.note = matches, note

    def blocks(self, width: int) -> list[Block]:
        out = []
        if self.note:
            out.append(note(self.note) if self.matches else message(self.note))
        if self.matches:
            out.append(Block(skills_table(self.matches)))
        return out
