"""The archive's occupancy: which feature cells a job's candidates filled, and each cell's elite.

Drawn as a grid by `openkernel archive` and the dashboard's archive tab: rows are the kind of
kernel and how many kernels it launches, columns the tile and the warps (``features``). The
elite is the archive's: the correct candidate of the cell with the highest score, the earlier
on a tie (``archive.Archive``), never the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from openkernel.search.features import KINDS, LAUNCHES_MAX, cell_of, kernel_features


@dataclass(frozen=True)
class Cell:
    """One occupied cell: its coordinates, how many candidates landed in it, its elite."""

    kind: str
    launches: int
    tile: int
    warps: int
    tried: int = 0
    elite_id: str | None = None
    elite_label: str = ""
    elite_speedup: float = -1.0

    @property
    def row(self) -> str:
        """The grid row: the kind of kernel and its launches."""
        if self.launches < 0:
            return KINDS.get(self.kind, self.kind)
        n = f"{self.launches}+" if self.launches >= LAUNCHES_MAX else str(self.launches)
        return f"{KINDS.get(self.kind, self.kind)} · {n} kernel{'' if n == '1' else 's'}"

    @property
    def column(self) -> str:
        """The grid column: the tile (elements per program) and the warps."""
        tile = f"tile 2^{self.tile}" if self.tile >= 0 else "tile ?"
        warps = f"{self.warps}w" if self.warps >= 0 else "?w"
        return f"{tile} · {warps}"


def occupancy(kernels: Iterable[Mapping]) -> list[Cell]:
    """Occupied cells of a job, from its kernel rows (in the order they were judged).

    Each mapping needs ``features``, ``is_program0``, ``correctness``, ``score``,
    ``runtime_improvement``, ``id`` and ``label`` (and ``code``, ``metadata``, ``origin`` to
    place a row stored before the archive had its present dimensions); the reference and rows
    without code (a generation failure) are left out.
    """
    tried: dict[tuple, int] = {}
    elites: dict[tuple, Mapping] = {}
    for k in kernels:
        features = k.get("features") or {}
        if "kind" not in features and (k.get("code") or "").strip():  # stored before the kinds
            params = (k.get("metadata") or k.get("meta") or {}).get("params")
            features = kernel_features(k["code"], params, k.get("origin") or "")
        if k.get("is_program0") or not features:
            continue
        cell = cell_of(features)
        tried[cell] = tried.get(cell, 0) + 1
        if k.get("correctness") and (cell not in elites
                                     or (k.get("score") or 0) > (elites[cell].get("score") or 0)):
            elites[cell] = k
    out = []
    for cell, n in tried.items():
        e = elites.get(cell)
        out.append(Cell(*cell, tried=n, elite_id=e["id"] if e else None,
                        elite_label=(e.get("label") or "") if e else "",
                        elite_speedup=float(e.get("runtime_improvement") or -1) if e else -1.0))
    order = list(KINDS)  # Inductor seed, library-backed, fused template, hand-written
    return sorted(out, key=lambda c: (order.index(c.kind) if c.kind in order else len(order),
                                      c.launches, c.tile, c.warps))


def grid(cells: list[Cell]) -> tuple[list[str], list[str], dict[tuple[str, str], Cell]]:
    """Rows, columns (both in order) and the cell at each (row, column) that holds one."""
    rows = list(dict.fromkeys(c.row for c in cells))
    columns = list(dict.fromkeys(c.column for c in sorted(cells, key=lambda c: (c.tile, c.warps))))
    return rows, columns, {(c.row, c.column): c for c in cells}
