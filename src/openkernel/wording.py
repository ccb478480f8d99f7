"""How numbers and counts read wherever they are shown: one speedup format and one tally of
candidates for the CLI, the TUI, the dashboard and the logs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from openkernel.schemas import NOT_JUDGED


def speedup_text(value: float | None, missing: str = "-") -> str:
    """A speedup to three significant figures (``0.00312x``, ``0.135x``, ``1.52x``, ``12.3x``):
    two decimals would show 0.003x as 0.00x and 0.135 -> 0.144 as 0.14x -> 0.14x. ``missing``
    for a speedup not measured (-1 in the schema)."""
    if value is None or not math.isfinite(value) or value <= 0:
        return missing
    if value >= 1000:
        return f"{value:.0f}x"
    return f"{value:#.3g}".rstrip(".") + "x"


def three_figures(value: float | None) -> float | None:
    """A measured number kept a number (tables sort and filter on it) but shown to three
    significant figures: 15.2307344999 ms is 15.2 ms; None, NaN and -1 (not measured) stay
    None."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return float(f"{value:.3g}")


def flagged_why(meta: Mapping) -> str:
    """Why a kernel was flagged for review ("" if it was not): its ``metadata.flagged_for_review``
    says (older results hold only ``True``)."""
    flagged = meta.get("flagged_for_review") if isinstance(meta, Mapping) else None
    if not flagged:
        return ""
    why = flagged.get("why") if isinstance(flagged, Mapping) else None
    return why or "faster than the hardware allows"


# Statuses that are no verdict on a candidate's own code: not run here (CUDA C++ without a
# GPU), an evaluator fault, no kernel generated.
NOT_JUDGED_VALUES = frozenset(s.value for s in NOT_JUDGED)


@dataclass(frozen=True)
class Tally:
    """A job's candidates by what became of them: the one count every view words alike (the
    chat, the header, the log, the trajectory, `openkernel run`, `runs`, the dashboard).

    ``judged`` candidates have a verdict on their own code (faster, correct, incorrect, a
    timeout, a build error); the others were stored without one (``not_judged``).
    """

    candidates: int = 0
    not_judged: int = 0

    @property
    def judged(self) -> int:
        return self.candidates - self.not_judged

    @classmethod
    def of(cls, by_status: Mapping) -> "Tally":
        """From candidates counted by status (Status members or their values)."""
        total = sum(by_status.values())
        unjudged = sum(n for s, n in by_status.items()
                       if getattr(s, "value", s) in NOT_JUDGED_VALUES)
        return cls(total, unjudged)

    def words(self, noun: bool = True) -> str:
        """``6 candidates``, ``6 candidates (2 not judged)``, ``4 candidates, none judged``
        (without the noun, for a table's candidates column: ``6 (2 not judged)``)."""
        head = str(self.candidates)
        if noun:
            head += f" candidate{'' if self.candidates == 1 else 's'}"
        if not self.not_judged:
            return head
        if not self.judged:
            return f"{head}, none judged"
        return f"{head} ({self.not_judged} not judged)"
