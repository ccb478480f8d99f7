"""StreamView: the answers models are writing, one box per branch, live; gone once judged.

Each box shows the last lines of the answer's reasoning (the text around the code block; the
kernel itself reads ``[writing the kernel: N lines so far…]``), wrapped to the panel. Once the
candidate is judged its box goes and the chat keeps one line of it; the full answer is in the
candidate view (Enter on its row).
"""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.widget import Widget

from kernelcode.tui.formatting import PHASE_WORDS
from kernelcode.tui.narrate import reasoning_view
from kernelcode.tui.state import Candidate, RunState

TAIL_LINES = 4  # lines of each live answer: enough to follow it, few enough for 4 branches
DIM = "#8b949e"


class StreamBox(Widget):
    """One branch's answer as it arrives."""

    DEFAULT_CSS = "StreamBox { height: auto; }"

    def __init__(self, row: Candidate, **kwargs) -> None:
        super().__init__(**kwargs)
        self.row = row
        self._key: tuple = ()

    def update(self, row: Candidate) -> None:
        key = (len(row.answer), row.attempt, row.generated, row.model, row.phase)
        if key != self._key:
            self.row, self._key = row, key
            self.refresh(layout=True)

    def render(self) -> Text:
        row = self.row
        # once answered, what its judging is at (queued, building, testing...), as the log says
        judging = PHASE_WORDS.get(row.phase, "judging") if row.phase != "generating" else "judging"
        doing = f"answered, {judging}…" if row.generated else "writing…"
        if row.attempt > 1:
            doing += f" (attempt {row.attempt})"
        head = Text.assemble(("▸ ", "bold #d2a8ff"), (f"{row.label} ", "bold"),
                             (f"{row.model} · {doing}", DIM))
        body = Text(reasoning_view(row.answer).strip() or "…", style="italic")
        width = max(self.size.width, 20)
        tail = body.wrap(self.app.console, width)[-TAIL_LINES:]
        return Text("\n").join([head, *tail])


class StreamView(Vertical):
    """The live boxes, kept in step with ``RunState.streaming()``."""

    DEFAULT_CSS = "StreamView { height: auto; max-height: 60%; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._version = -1
        self._boxes: dict[str, StreamBox] = {}

    @property
    def labels(self) -> list[str]:
        """The branches shown now (tests read it)."""
        return list(self._boxes)

    def show(self, state: RunState) -> None:
        """Redraw when a piece arrived or an answer was judged (once per batch of events)."""
        if state.streams_version == self._version and state.finished is None:
            return
        self._version = state.streams_version
        live = {row.label: row for row in state.streaming()}
        for label in [k for k in self._boxes if k not in live]:
            self._boxes.pop(label).remove()
        for label, row in live.items():
            box = self._boxes.get(label)
            if box is None:
                box = self._boxes[label] = StreamBox(row, classes="stream-box")
                self.mount(box)
            box.update(row)

    def text(self) -> str:
        """What the boxes say, as plain text (for tests)."""
        return "\n".join(box.render().plain for box in self._boxes.values())
