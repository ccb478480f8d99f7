"""RooflineView: the memory and compute ceilings and where each kernel sits, in text.

Drawn with Rich Text on a character grid (log-log) rather than with a plotting package, so
the app needs no extra dependency and the plot is identical in every snapshot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from kernelcode.tui import profile
from kernelcode.tui.formatting import STATUS_COLOURS, label_of
from kernelcode.tui.screens.overlay import Block, Overlay, message, note
from openkernel.schemas import Program, Status

DIM = "#6e7681"
NO_DATA = ("No roofline yet: it needs each kernel's FLOPs, bytes and runtime "
           "(profiler_data flops / bytes / gflops) and the hardware's peak bandwidth and FLOP/s.")
CPU_NO_DATA = ("No roofline on the CPU: Triton runs under its interpreter here, so there are "
               "no GPU ceilings to draw and no profile to place the kernels. Run on a GPU.")


@dataclass(frozen=True)
class Point:
    label: str
    intensity: float  # FLOP per byte
    gflops: float
    status: Status | None


def points_of(programs: list[Program]) -> tuple[list[Point], float | None, float | None]:
    """Kernels with intensity and rate, plus the peak bandwidth (GB/s) and GFLOP/s if known."""
    pts, peak_gbs, peak_gflops = [], None, None
    for p in programs:
        data = profile.profiled(p)
        ai, rate = profile.pick(data, "intensity"), profile.pick(data, "gflops")
        flops, nbytes = profile.pick(data, "flops"), profile.pick(data, "bytes")
        if not isinstance(ai, (int, float)) and isinstance(flops, (int, float)) and nbytes:
            ai = flops / nbytes
        if isinstance(ai, (int, float)) and ai > 0 and isinstance(rate, (int, float)) and rate > 0:
            pts.append(Point(label_of(p), float(ai), float(rate), p.status))
        peak_gbs = profile.pick(data, "peak_gbs") or peak_gbs
        peak_gflops = profile.pick(data, "peak_gflops") or peak_gflops
    return pts, peak_gbs, peak_gflops


def _ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** e for e in range(math.floor(lo), math.ceil(hi) + 1) if lo <= e <= hi]


def roofline_plot(points: list[Point], peak_gbs: float | None, peak_gflops: float | None,
                  width: int = 72, height: int = 18) -> Text:
    """A log-log plot: x arithmetic intensity (FLOP/byte), y GFLOP/s."""
    xs = [p.intensity for p in points] + ([peak_gflops / peak_gbs] if peak_gbs and peak_gflops else [])
    ys = [p.gflops for p in points] + ([peak_gflops] if peak_gflops else [])
    x0, x1 = math.log10(min(xs)) - 1, math.log10(max(xs)) + 1
    y0, y1 = math.log10(min(ys)) - 1, math.log10(max(ys)) + 0.5
    col = lambda v: min(width - 1, max(0, round((math.log10(v) - x0) / (x1 - x0) * (width - 1))))
    row = lambda v: min(height - 1, max(0, round((y1 - math.log10(v)) / (y1 - y0) * (height - 1))))
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * width for _ in range(height)]
    if peak_gbs or peak_gflops:
        for c in range(width):
            ai = 10 ** (x0 + c / (width - 1) * (x1 - x0))
            roof = min(v for v in (peak_gflops, (peak_gbs or 0) * ai or None) if v)
            flat = peak_gflops is not None and roof >= peak_gflops
            r = row(roof)
            if 0 <= r < height and not (r == 0 and roof > 10 ** y1):
                grid[r][c] = ("─" if flat else "╱", "#d2a8ff")
    for p in points:
        colour = STATUS_COLOURS.get(p.status, "#ffffff") if p.status else "#ffffff"
        grid[row(p.gflops)][col(p.intensity)] = ("●", colour)
    text = Text()
    y_labels = {row(v): f"{v:g}" for v in _ticks(y0, y1)}
    for r, cells in enumerate(grid):
        text.append(f"{y_labels.get(r, ''):>8} │", style=DIM)
        for ch, style in cells:
            text.append(ch, style=style)
        text.append("\n")
    text.append(" " * 9 + "└" + "─" * width + "\n", style=DIM)
    axis = [" "] * (width + 10)
    for v in _ticks(x0, x1):
        for k, ch in enumerate(f"{v:g}"):
            if 10 + col(v) + k < len(axis):
                axis[10 + col(v) + k] = ch
    text.append("".join(axis).rstrip() + "\n", style=DIM)
    text.append(" " * 10 + "arithmetic intensity (FLOP/byte) →   ↑ GFLOP/s", style=DIM)
    return text


def legend(points: list[Point], peak_gbs: float | None, peak_gflops: float | None) -> Table:
    """One line per kernel: where it sits and how far below its roof."""
    table = Table(box=None, padding=(0, 2), show_edge=False)
    for name in ("kernel", "FLOP/byte", "GFLOP/s", "% of roof"):
        table.add_column(name, justify="left" if name == "kernel" else "right")
    for p in points:
        roofs = [v for v in (peak_gflops, peak_gbs * p.intensity if peak_gbs else None) if v]
        pct = f"{100 * p.gflops / min(roofs):.0f}%" if roofs else "–"
        colour = STATUS_COLOURS.get(p.status, "") if p.status else ""
        table.add_row(Text("● " + p.label, colour), f"{p.intensity:.3g}", f"{p.gflops:.4g}", pct)
    return table


class RooflineView(Overlay):
    """Roofline: ``r``."""

    TITLE_TEXT = "Roofline"

    def __init__(self, programs: list[Program], on_cpu: bool = False,
                 peaks: tuple[float | None, float | None] = (None, None)) -> None:
        """``peaks``: the run's (GB/s, GFLOP/s) ceilings (RunStarted), for kernels whose
        profile does not carry them (Nsight Compute's does not)."""
        self.points, gbs, gflops = points_of(programs)
        self.peak_gbs, self.peak_gflops = gbs or peaks[0], gflops or peaks[1]
        self.on_cpu = on_cpu

    def blocks(self, width: int) -> list[Block]:
        if not self.points:
            return [message(CPU_NO_DATA if self.on_cpu else NO_DATA)]
        if not (self.peak_gbs or self.peak_gflops):
            head = note("Hardware peaks unknown: kernels placed, ceilings not drawn.")
        else:
            head = note(f"Ceilings: {self.peak_gbs or '?'} GB/s memory (╱), "
                        f"{self.peak_gflops or '?'} GFLOP/s compute (─).")
        return [head, Block(roofline_plot(self.points, self.peak_gbs, self.peak_gflops),
                            lines=True),
                Block(legend(self.points, self.peak_gbs, self.peak_gflops))]
