"""What a kernel family is: tunables with discrete choices, a matcher and a renderer.

The offline generator's vocabulary: a *family* is a kind of kernel it can write (hand-written
ones in ``handwritten/``, the compiler's in ``compiler/families.py``); a family's tunables make
each candidate a *templated* kernel (its parameter space, as ``TEMPLATE_PARAMS`` is for a
model's answer); the evaluator judges the points of that space together as one *sweep*.
Stored params keep the family's name under the key ``template`` (older jobs' rows have it).

Search over tunables is deliberately simple (DESIGN: the MAP-Elites archive does the
selection): start points are curated per device, mutation moves one or two tunables to a
neighbouring choice (sometimes a random one), recombination takes each tunable from either
parent.
"""

from __future__ import annotations

import itertools
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field

from openkernel.records import KernelPrecision, TaskProbe
from openkernel.task import Task


@dataclass(frozen=True)
class Tunable:
    """One launch or tiling parameter and the values worth trying, smallest first."""

    name: str
    choices: tuple
    # Under the interpreter: fewer, larger programs; warps and stages mean nothing there, so
    # they are pinned (mutating them would only spend evaluations on identical runs).
    cpu_choices: tuple | None = None
    why: str = ""

    def values(self, interpreter: bool) -> tuple:
        return self.cpu_choices if interpreter and self.cpu_choices else self.choices


@dataclass
class Match:
    """A family that fits a task, with what it learned about the task (``spec``)."""

    family: "Family"
    why: str
    spec: dict = field(default_factory=dict)


class Family(ABC):
    """A family of parametrised kernels. Subclasses set the class attributes and implement two methods."""

    name: str = ""
    summary: str = ""
    backends: tuple[str, ...] = ("triton",)
    tunables: tuple[Tunable, ...] = ()
    # Curated start points; under the interpreter the CPU ones (few programs in the grid).
    starts: tuple[dict, ...] = ()
    cpu_starts: tuple[dict, ...] = ()

    @abstractmethod
    def match(self, task: Task, probe: TaskProbe, backend: str) -> Match | str | None:
        """A Match, a reason this family nearly fits but cannot (str), or None."""

    @abstractmethod
    def render(self, match: Match, params: dict, backend: str) -> str:
        """The candidate module (defines ``ModelNew``) for these params."""

    def describe(self, match: Match, params: dict) -> str:
        """A short label of what the candidate is, e.g. "gelu elementwise"."""
        return f"{match.spec.get('label', self.name)}"

    def precision(self, match: Match, params: dict, probe: TaskProbe) -> list[KernelPrecision]:
        """How each GEMM or convolution of the candidate for ``params`` computes (none here)."""
        return []

    def tunables_for(self, backend: str) -> tuple[Tunable, ...]:
        return self.tunables

    # -- search over tunables ------------------------------------------------------------

    def start(self, rng: random.Random, interpreter: bool, index: int, backend: str) -> dict:
        """A start point: curated ones in turn by ``index`` (branch), random beyond them."""
        starts = self.cpu_starts if interpreter and self.cpu_starts else self.starts
        if index < len(starts):
            return self.clean(dict(starts[index]), interpreter, backend)
        return {t.name: rng.choice(t.values(interpreter)) for t in self.tunables_for(backend)}

    def clean(self, params: dict, interpreter: bool, backend: str) -> dict:
        """Keep only this family's tunables, each on an allowed value (nearest by index)."""
        out = {}
        for t in self.tunables_for(backend):
            values = t.values(interpreter)
            value = params.get(t.name)
            if value not in values:
                value = min(values, key=lambda v: abs(v - value)) if isinstance(
                    value, (int, float)) else values[len(values) // 2]
            out[t.name] = value
        return out

    def mutate(self, params: dict, rng: random.Random, interpreter: bool,
               backend: str) -> tuple[dict, list[str]]:
        """Move one tunable (a quarter of the time two) to another choice; return what moved."""
        params = self.clean(params, interpreter, backend)
        movable = [t for t in self.tunables_for(backend) if len(t.values(interpreter)) > 1]
        if not movable:
            return params, []
        count = 2 if len(movable) > 1 and rng.random() < 0.25 else 1
        changed = []
        for t in rng.sample(movable, count):
            values = t.values(interpreter)
            i = values.index(params[t.name])
            if rng.random() < 0.2:  # an occasional jump escapes a local optimum
                j = rng.choice([k for k in range(len(values)) if k != i])
            else:
                j = i + rng.choice([-1, 1])
                j = j if 0 <= j < len(values) else i - (j - i)
            params[t.name] = values[j]
            changed.append(f"{t.name} {values[i]}->{values[j]}")
        return params, changed

    def space(self, interpreter: bool, backend: str) -> list[dict]:
        """Every combination of the tunables' values (the family's whole space), as a list:
        for small spaces only (a compiler family's can hold millions; see ``points``)."""
        return list(self.points(interpreter, backend))

    def points(self, interpreter: bool, backend: str) -> Iterator[dict]:
        """The space's combinations one at a time, in a fixed order."""
        tunables = self.tunables_for(backend)
        for values in itertools.product(*(t.values(interpreter) for t in tunables)):
            yield dict(zip((t.name for t in tunables), values))

    def neighbours(self, params: dict, interpreter: bool, backend: str) -> list[dict]:
        """The points one step away: each tunable moved to the next value up or down."""
        out = []
        for t in self.tunables_for(backend):
            values = t.values(interpreter)
            i = values.index(params[t.name])
            for j in (i - 1, i + 1):
                if 0 <= j < len(values):
                    out.append({**params, t.name: values[j]})
        return out

    def crossover(self, a: dict, b: dict, rng: random.Random, interpreter: bool,
                  backend: str) -> dict:
        """Each tunable from either parent with equal chance."""
        a = self.clean(a, interpreter, backend)
        b = self.clean(b, interpreter, backend)
        return {k: (a[k] if rng.random() < 0.5 else b[k]) for k in a}
