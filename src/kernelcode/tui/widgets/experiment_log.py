"""ExperimentLog: one row per candidate, in the seed's status colours.

A small Line API table rather than Textual's DataTable. Under a fast stream (thousands of
candidates) a DataTable's cost grows with its length: every added row or updated cell bumps a
counter that keys all its render caches, so each change re-renders every visible cell, rebuilds
lists as long as the table (row order, line offsets) and re-measures the new cells. Here:

- a row is data (a tuple) until it scrolls into view; it is drawn once into a Strip, cached
  until its content, its stripe or the cursor changes;
- adding or updating rows repaints only the lines on screen that changed, and rows below the
  view cost nothing but an append; the scrollable size (which re-lays out the screen and
  redraws the scrollbar) follows at most every SIZE_INTERVAL_S;
- the columns have fixed widths, so nothing is ever measured.

It looks and behaves like the DataTable it replaced: a header line, zebra stripes, a row
cursor (up/down/page/home/end), Enter or a click selects the row under the cursor.
"""

from __future__ import annotations

import time
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kernelcode.tui.formatting import speedup_str, status_text
from kernelcode.tui.state import Candidate

# (header, width, right-justified). Fixed widths: nothing is measured as rows arrive.
COLUMNS: tuple[tuple[str, int, bool], ...] = (
    ("#", 4, False), ("label", 8, False), ("speedup", 8, True), ("status", 17, False),
    ("what it tried", 56, False))
PADDING = 1  # cells either side of each column, as a DataTable draws them
ROW_WIDTH = sum(width + 2 * PADDING for _, width, _ in COLUMNS)
NUMBER_STYLE = Style.parse("#8b949e")


def _cells(row: Candidate, number: int) -> tuple[Text, ...]:
    """The row's cells as Rich Text, in column order."""
    speed = Text(speedup_str(row.speedup))
    if row.mark == "keep":
        speed.stylize("bold")
    return (Text(str(number), style=NUMBER_STYLE), Text(row.label), speed,
            status_text(row.status, row.phase), Text(row.description or row.model or ""))


class ExperimentLog(ScrollView, can_focus=True):
    """Every candidate of the run; Enter (or a click) on a row opens its detail."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "experiment-log--header", "experiment-log--cursor", "experiment-log--even-row"}

    # The DataTable's own look, so the panel reads as before.
    DEFAULT_CSS = """
    ExperimentLog {
        background: $surface;
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .experiment-log--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .experiment-log--header { background-tint: $foreground 5%; }
        }
        & > .experiment-log--header { text-style: bold; background: $panel; color: $foreground; }
        & > .experiment-log--even-row { background: $surface-lighten-1 50%; }
        &:dark > .experiment-log--even-row { background: $surface-darken-1 40%; }
        & > .experiment-log--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first", "First", show=False),
        Binding("end,ctrl+end", "last", "Last", show=False),
    ]

    cursor_row: reactive[int] = reactive(0, init=False)

    # How often, at most, the scrollable height follows the rows added: each change re-lays
    # out the screen and redraws the scrollbars, so under a fast stream it lags by this much.
    SIZE_INTERVAL_S = 0.5

    class RowSelected(Message):
        """A row was chosen with Enter or a click: ``label`` is the candidate's."""

        def __init__(self, log: ExperimentLog, label: str) -> None:
            super().__init__()
            self.log, self.label = log, label

        @property
        def control(self) -> ExperimentLog:
            return self.log

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._labels: list[str] = []  # row order
        self._index: dict[str, int] = {}  # label -> row index
        self._rows: dict[str, tuple[Candidate, int]] = {}  # label -> (snapshot, version)
        self._strips: LRUCache[tuple, Strip] = LRUCache(256)  # a few screenfuls
        self._style_key: tuple | None = None
        self._last_size_update = 0.0
        self._size_scheduled = False
        self._style_cache: tuple[Style, Style, Style, Style] = (Style(),) * 4

    # -- data ----------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._labels)

    @property
    def labels(self) -> list[str]:
        """The candidates' labels, in row order."""
        return list(self._labels)

    def upsert_many(self, rows) -> None:
        """Add or update rows (each a Candidate); repaints only the changed lines on screen."""
        top, bottom = self._visible_rows()
        grew = False
        for row in rows:
            snapshot = Candidate(row.label, row.iteration, row.branch, row.model,
                                 row.description, None, row.status, row.speedup, row.mark,
                                 row.phase)
            index = self._index.get(row.label)
            if index is None:
                index = self._index[row.label] = len(self._labels)
                self._labels.append(row.label)
                self._rows[row.label] = (snapshot, 0)
                grew = True
            else:
                old, version = self._rows[row.label]
                if old == snapshot:
                    continue
                self._rows[row.label] = (snapshot, version + 1)
            if top <= index < bottom:
                self.refresh_line(index + 1)
        if grew and not self._size_scheduled:
            wait = self._last_size_update + self.SIZE_INTERVAL_S - time.monotonic()
            if wait > 0:
                self._size_scheduled = True
                self.set_timer(wait, self._update_size)
            else:
                self._update_size()

    def _update_size(self) -> None:
        self._size_scheduled = False
        self._last_size_update = time.monotonic()
        self.virtual_size = Size(ROW_WIDTH, len(self._labels) + 1)

    def remove(self, label: str) -> None:
        """Drop a row (a branch the generator had nothing for); later rows move up."""
        if label not in self._index:
            return
        self._labels.remove(label)
        del self._rows[label]
        self._index = {name: i for i, name in enumerate(self._labels)}
        self._strips.clear()
        self._update_size()
        self.refresh()

    def upsert(self, row: Candidate) -> None:
        self.upsert_many([row])

    def _visible_rows(self) -> tuple[int, int]:
        """Row indices [top, bottom) currently on screen."""
        scroll_y = round(self.scroll_offset.y)
        return scroll_y, scroll_y + max(self.size.height - 1, 0)

    # -- drawing -------------------------------------------------------------------------------
    def notify_style_update(self) -> None:
        # Focus moving in and out (an overlay opening and closing) restyles the table: the
        # strips are keyed by the styles they were drawn with, so each look is drawn once.
        super().notify_style_update()
        self._style_key = None

    def _styles(self) -> tuple[Style, Style, Style, Style]:
        """Base, even-row, cursor and header styles (resolved each frame, cheaply cached)."""
        key = (self.has_focus,)
        if key != self._style_key:
            self._style_key = key
            self._style_cache = (
                self.rich_style,
                self.get_component_styles("experiment-log--even-row").rich_style,
                self.get_component_rich_style("experiment-log--cursor"),
                self.get_component_styles("experiment-log--header").rich_style,
            )
        return self._style_cache

    def _line(self, cells, style: Style, post: Style | None = None, header: bool = False) -> Strip:
        """One table line: each cell cropped (with …) and padded to its column."""
        line = Text(style=style, no_wrap=True, end="")
        pad = " " * PADDING
        for cell, (_, width, right) in zip(cells, COLUMNS):
            cell = cell.copy() if isinstance(cell, Text) else Text(str(cell))
            cell.truncate(width, overflow="ellipsis")
            space = " " * (width - cell.cell_len)
            line.append(pad)
            if right and not header:
                line.append(space)
            line.append_text(cell)
            if not right or header:
                line.append(space)
            line.append(pad)
        segments = list(line.render(self.app.console))
        if post is not None:
            segments = list(Segment.apply_style(segments, post_style=post))
        return Strip(segments, ROW_WIDTH)

    def _row_strip(self, index: int) -> Strip:
        label = self._labels[index]
        row, version = self._rows[label]
        styles = self._styles()
        base, even, cursor, _ = styles
        is_cursor = index == self.cursor_row
        key = (label, version, index % 2, is_cursor, styles)
        strip = self._strips.get(key)
        if strip is None:
            style = base + (even if index % 2 == 0 else Style())
            post = None
            if is_cursor:
                # The cursor's colours win over the status colours, as in a DataTable.
                style += cursor
                post = Style(color=cursor.color, bgcolor=cursor.bgcolor)
            strip = self._strips[key] = self._line(_cells(row, index + 1), style, post)
        return strip

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        base, _, _, header = self._styles()
        if y == 0:
            strip = self._strips.get(("header", base, header))
            if strip is None:
                strip = self._strips[("header", base, header)] = self._line(
                    [Text(name) for name, _, _ in COLUMNS], base + header, header=True)
        else:
            index = y - 1 + scroll_y
            if not 0 <= index < len(self._labels):
                return Strip.blank(width, base)
            strip = self._row_strip(index)
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    def _on_hide(self, event: events.Hide) -> None:
        """Made invisible under an open view: keep the focus (Textual's default blurs), as
        moving it restyles and repaints the panels when the view opens and closes."""
        event.prevent_default()
        if self.show_horizontal_scrollbar:
            self.horizontal_scrollbar.post_message(event)
        if self.show_vertical_scrollbar:
            self.vertical_scrollbar.post_message(event)

    # -- cursor and selection ------------------------------------------------------------------
    def watch_cursor_row(self, old: int, new: int) -> None:
        self.refresh_line(old + 1)
        self.refresh_line(new + 1)
        self.scroll_to_region(Region(0, new + 1, 1, 1), spacing=Spacing(top=1),
                              animate=False, force=True, immediate=True)

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._labels) - 1))

    def _page(self) -> int:
        return max(self.scrollable_content_region.height - 1, 1)

    def action_cursor_up(self) -> None:
        self.cursor_row -= 1

    def action_cursor_down(self) -> None:
        self.cursor_row += 1

    def action_page_up(self) -> None:
        self.cursor_row -= self._page()

    def action_page_down(self) -> None:
        self.cursor_row += self._page()

    def action_first(self) -> None:
        self.cursor_row = 0

    def action_last(self) -> None:
        self.cursor_row = len(self._labels) - 1

    def action_select_cursor(self) -> None:
        if 0 <= self.cursor_row < len(self._labels):
            self.post_message(self.RowSelected(self, self._labels[self.cursor_row]))

    def _on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:
            return
        index = offset.y - 1 + round(self.scroll_offset.y)
        if index < len(self._labels):
            self.cursor_row = index
            self.action_select_cursor()
