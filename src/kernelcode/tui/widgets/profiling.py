"""ProfilingPanel: bottleneck, bandwidth, L2 hit rate, occupancy and headroom of a kernel."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from kernelcode.tui import profile
from kernelcode.tui.formatting import label_of
from kernelcode.tui.state import RunState

DIM = "#8b949e"


class ProfilingPanel(Widget):
    """Shows the best kernel's profile (or the latest profiled one), labelled by its source."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._state: RunState | None = None
        self._key: tuple | None = None  # what was drawn: redraw only when it changes

    def show(self, state: RunState) -> None:
        """Redraw from the run's state (called once per batch of events)."""
        best = state.best.id if state.best is not None else None
        key = (best, state.on_cpu, len(state.evaluated) if best is None else -1)
        if state is not self._state or key != self._key:
            self._state, self._key = state, key
            self.refresh()

    def render(self) -> Table | Text:
        state = self._state
        if state is None:
            return Text("Waiting for the engine…", style=DIM)
        latest_first = (c.program for c in reversed(state.evaluated) if c.program is not None)
        program, which = profile.choose(state.best, latest_first)
        if program is None:
            return Text(profile.why_no_profile(state.on_cpu, len(state.evaluated)), style=DIM)
        data = profile.profiled(program)
        source = "estimate" if data.get("estimate") else "measured"
        table = Table.grid(padding=(0, 2))
        table.add_column(style=DIM)
        table.add_column()
        table.add_row("Kernel", Text.assemble(label_of(program), (f" ({which}, {source})", DIM)))
        rows = profile.summary_rows(data)
        for name, value in rows:
            table.add_row(name, value)
        if not rows:
            # An analytic estimate without hardware ceilings (e.g. the CPU): show what it knows.
            if data.get("bytes"):
                table.add_row("Moves", f"{_si(data['bytes'])}B per call (minimum)")
            if data.get("flops"):
                table.add_row("FLOPs", f"{_si(data['flops'])} per call")
            intensity = data.get("arithmetic_intensity")
            if data.get("bytes"):
                table.add_row("Intensity", f"{intensity:.2f} FLOP/byte" if intensity else
                              Text("unknown (no FLOPs counted for these ops)", DIM))
            reason = ("no GPU profiler on the CPU: timings are interpreter timings"
                      if state.on_cpu else "no bottleneck metrics (no ncu, no ceilings)")
            table.add_row("", Text(reason, DIM))
        return table


def _si(value: float) -> str:
    """``16.4 k``, ``536.9 M``: three figures at any size (a small task is not "0.0 MB")."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.1f} {prefix}"
    return f"{value:.0f} "
