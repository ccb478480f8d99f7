"""TextLines: a widget whose ``render()`` Text is drawn line by line as cached Strips.

Textual turns a rendered Rich Text into its own Content on every repaint, which for a Text of
many short spans (the trajectory's bars and marks) costs milliseconds per frame. Panels that
change after every batch of events draw through the Line API instead: ``render()`` is turned
into Strips once per change (one Segment per span) and each frame only looks them up.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget


class TextLines(Widget):
    """Subclasses implement ``render() -> Text`` (lines split on newlines, never wrapped)."""

    _line_strips: list[Strip] | None = None
    _line_key: tuple | None = None

    def refresh(self, *regions, repaint: bool = True, layout: bool = False,
                recompose: bool = False):
        if repaint:
            self._line_strips = None
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def render(self) -> Text:  # pragma: no cover - subclasses draw
        return Text()

    def render_line(self, y: int) -> Strip:
        width, base = self.size.width, self.rich_style
        key = (width, base)
        if self._line_strips is None or key != self._line_key:
            console = self.app.console
            self._line_key = key
            self._line_strips = [
                Strip(list(Segment.apply_style(line.render(console), base))
                      ).adjust_cell_length(width, base)
                for line in self.render().split("\n", allow_blank=True)]
        if y < len(self._line_strips):
            return self._line_strips[y]
        return Strip.blank(width, base)
