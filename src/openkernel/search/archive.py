"""The MAP-Elites archive: the best correct kernel of each feature cell.

Parents are drawn from the elites: with probability ``exploration_ratio`` uniformly (explore
other kinds of kernel), otherwise by a tournament over the best (exploit). Before anything is
correct, the reference (program 0) or the starting kernel is the parent.
"""

from __future__ import annotations

import random

from openkernel.schemas import Program
from openkernel.search.features import cell_of, kernel_features


class Archive:
    def __init__(self, exploration_ratio: float = 0.3, tournament: int = 3):
        self.exploration_ratio = exploration_ratio
        self.tournament = tournament
        self.elites: dict[tuple, Program] = {}
        self.roots: list[Program] = []  # program 0 and starting kernels
        self.best: Program | None = None
        self.size = 0

    @staticmethod
    def features_of(program: Program) -> dict:
        if "kind" not in (program.metadata.get("features") or {}):  # none, or older dimensions
            program.metadata["features"] = kernel_features(
                program.code, program.metadata.get("params"), program.metadata.get("origin", "")
            )
        return program.metadata["features"]

    def add(self, program: Program) -> bool:
        """Offer a judged program; returns True when it became the job's best."""
        self.size += 1
        if program.is_program0 or program.metadata.get("origin") in ("reference", "file", "best"):
            self.roots.append(program)
        if not program.is_program0 and program.code.strip():
            self.features_of(program)  # every candidate is placed (occupancy counts the tried)
        if not program.can_be_best:  # correct and not the reference: elites are the same
            return False
        cell = cell_of(self.features_of(program))
        current = self.elites.get(cell)
        if current is None or program.score > current.score:
            self.elites[cell] = program
        if self.best is None or program.score > self.best.score:  # the earlier wins a tie
            self.best = program
            return True
        return False

    @property
    def best_speedup(self) -> float:
        if self.best is None or self.best.kernel_exec_result is None:
            return -1.0
        return self.best.kernel_exec_result.runtime_improvement

    def sample_parent(self, rng: random.Random) -> Program | None:
        elites = list(self.elites.values())
        if not elites:
            starts = [p for p in self.roots if not p.is_program0] or self.roots
            return rng.choice(starts) if starts else None
        if rng.random() < self.exploration_ratio:
            return rng.choice(elites)
        entrants = rng.sample(elites, min(self.tournament, len(elites)))
        return max(entrants, key=lambda p: p.score)

    def sample_inspirations(self, parent: Program | None, k: int, rng: random.Random) -> list[Program]:
        pool = [p for p in self.elites.values() if parent is None or p.id != parent.id]
        if not pool or k <= 0:
            return []
        pool.sort(key=lambda p: p.score, reverse=True)
        top = pool[: max(k, 1)]
        rest = pool[max(k, 1):]
        # The best elite plus random others: quality and diversity in one prompt.
        chosen = top[:1] + rng.sample(top[1:] + rest, min(k - 1, len(top) - 1 + len(rest)))
        return chosen[:k]
