"""KeysFooter: Textual's Footer, rebuilt only when the keys it shows change.

The stock Footer recomposes (new key widgets, styles, a layout of the screen) whenever the
focus moves, even when the keys shown stay the same, as they do when a view opens on top of
the panels and takes the focus. That cost 20-40 ms per open or close under load.
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


class KeysFooter(Footer):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._shown: tuple | None = None

    def bindings_changed(self, screen: Screen) -> None:
        shown = tuple(
            (key, active.binding.action, active.binding.description, active.enabled,
             active.tooltip)
            for key, active in screen.active_bindings.items() if active.binding.show)
        if shown == self._shown and self._bindings_ready:
            return
        self._shown = shown
        super().bindings_changed(screen)
