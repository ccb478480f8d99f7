"""Overlay: the shared frame of every modal view (title, body, Escape closes)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Static


class Overlay(Screen[None]):
    """A full screen with a title and a scrollable body; Escape (or its key) closes it.

    An opaque Screen rather than a ModalScreen: a modal redraws (and dims) the busy main screen
    beneath it on every frame, which under a fast event stream made opening an overlay take a
    quarter of a second. The app keys are bound here too, so the overlay's own key closes it,
    another overlay's key switches, and p/b/d/q keep working.
    """

    BINDINGS = [
        Binding("escape", "close", "Close", priority=True),
        Binding("d", "app.dashboard", "Dashboard"),
        Binding("k", "app.kernel_diff", "Kernel diff"),
        Binding("r", "app.roofline", "Roofline"),
        Binding("s", "app.skills", "Skills"),
        Binding("p", "app.pause", "Pause/resume"),
        Binding("b", "app.backend", "Backend"),
        Binding("q", "app.quit", "Quit"),
    ]
    TITLE_TEXT = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="overlay-frame") as frame:
            frame.border_title = self.TITLE_TEXT
            frame.border_subtitle = "Esc closes"
            yield from self.compose_header()
            with VerticalScroll(id="overlay-body"):
                yield from self.compose_body()

    def compose_header(self) -> ComposeResult:
        """Optional lines above the scrolling body."""
        yield from ()

    def compose_body(self) -> ComposeResult:
        """The overlay's content."""
        yield Static("")

    def action_close(self) -> None:
        self.dismiss()
