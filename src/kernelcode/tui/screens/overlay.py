"""Overlays: the kernel diff, roofline, skills and candidate views, drawn on the main screen.

One ``OverlayFrame`` widget lives on the main screen, hidden until a key shows a view in it;
then it takes the place of the header, panels and footer, which are hidden meanwhile (so a
fast stream of events into them costs nothing until the view closes). Pushing a Screen per overlay (as before) made every open compose and
style a new screen and every close restyle and redraw the whole main screen: 50-100 ms even on
an idle app. Showing the frame costs one layout and the drawing of the lines on screen.

A view (``Overlay`` subclass) only describes its content as blocks; ``OverlayBody`` draws them
through the Line API: plain text lines are turned into strips only when they scroll into view,
other renderables (tables, syntax-highlighted code) are rendered once when the view opens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.console import RenderableType
from rich.padding import Padding
from rich.segment import Segment
from rich.styled import Styled
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip


@dataclass(frozen=True)
class Block:
    """Part of a view: ``lines`` is unwrapped Text drawn line by line as it scrolls into view;
    anything else is rendered when the view opens, wrapped to the body's width or to
    ``width`` if that is wider (then it scrolls sideways)."""

    renderable: RenderableType
    lines: bool = False
    width: int = 0
    muted: bool = False  # drawn in the theme's muted text colour


def message(text: str) -> Block:
    """The whole content when there is nothing to show, and why."""
    return Block(Padding(Text(text), (1, 2)), muted=True)


def note(text: str) -> Block:
    """A muted line above the content."""
    return Block(Padding(Text(text), (0, 0, 1, 0)), muted=True)


def section(title: str) -> Block:
    return Block(Padding(Text(title, style="bold"), (1, 0, 0, 0)))


class Overlay:
    """A view shown in the overlay frame; its key toggles it, Escape closes it."""

    TITLE_TEXT = ""

    def blocks(self, width: int) -> list[Block]:
        """The content, for a body ``width`` cells wide."""
        return []


class OverlayBody(ScrollView, can_focus=False):
    """The scrolling content of the overlay frame (Line API, strips cached per line).

    It never takes the focus: moving the focus restyles the widgets it leaves and enters
    and made opening and closing a view cost a full repaint. The app's navigation keys
    scroll it while a view is open (``KeyActions.action_overlay_key``).
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"overlay-body--muted"}
    DEFAULT_CSS = "OverlayBody > .overlay-body--muted { color: $text-muted; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._items: list[Text | list[Segment]] = []
        self._strips: dict[int, Strip] = {}

    def show(self, blocks: list[Block], width: int, height: int) -> None:
        """Replace the content, drawn ``width`` cells wide (one less if it is taller than
        ``height`` and so needs a scrollbar)."""
        items = self._lay_out(blocks, width)
        if len(items) > height:
            items = self._lay_out(blocks, width - 1)
        self._items, self._strips = items, {}
        widest = max((i.cell_len if isinstance(i, Text) else Segment.get_line_length(i)
                      for i in items), default=0)
        self.scroll_to(0, 0, animate=False, immediate=True)
        self.virtual_size = Size(widest, len(items))
        self.refresh()

    def _lay_out(self, blocks: list[Block], width: int) -> list[Text | list[Segment]]:
        console = self.app.console
        options = console.options.update_width(max(width, 10))
        muted = self.get_component_rich_style("overlay-body--muted")
        items: list[Text | list[Segment]] = []
        for block in blocks:
            if block.muted:
                block = Block(Styled(block.renderable, muted), block.lines, block.width)
            if block.lines and isinstance(block.renderable, Text):
                items.extend(block.renderable.split("\n", allow_blank=True))
            else:
                wide = options.update_width(block.width) if block.width > width else options
                items.extend(console.render_lines(block.renderable, wide, pad=False))
        return items

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips = {}

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width, base = self.size.width, self.rich_style
        index = y + scroll_y
        if not 0 <= index < len(self._items):
            return Strip.blank(width, base)
        strip = self._strips.get(index)
        if strip is None:
            item = self._items[index]
            segments = list(item.render(self.app.console)) if isinstance(item, Text) else item
            strip = self._strips[index] = Strip(list(Segment.apply_style(segments, base)))
        return strip.crop_extend(scroll_x, scroll_x + width, base)


class OverlayFrame(Vertical):
    """The frame on the main screen's overlay layer; hidden while no view is open."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: Overlay | None = None

    def compose(self) -> ComposeResult:
        yield OverlayBody(id="overlay-body")

    @property
    def is_open(self) -> bool:
        return self.view is not None

    def open(self, view: Overlay) -> None:
        """Show ``view`` (replacing the one open, if any)."""
        if self.view is None:
            self._show_panels(False)
        self.view = view
        self.border_title = view.TITLE_TEXT
        self.border_subtitle = "Esc closes"
        width = max(self.app.size.width - 4, 20)  # inside the frame's border and padding
        body = self.query_one(OverlayBody)
        body.show(view.blocks(width), width, self.app.size.height - 2)
        self.display = True

    def _show_panels(self, show: bool) -> None:
        """Hide the rest of the screen while a view is open: the compositor draws every
        widget under a covering one, so covered panels would still cost each frame.
        (Invisible rather than not displayed: they keep their layout, and the focus.)"""
        for widget in self.screen.children:
            if widget is not self:
                widget.styles.visibility = "visible" if show else "hidden"

    def close(self) -> None:
        """Hide the frame; the panels come back as they are now."""
        self.view = None
        self.display = False
        self._show_panels(True)
