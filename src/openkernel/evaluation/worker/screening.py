"""Screening a template's combinations cheaply: the clearly slower ones dropped early.

A sweep's combinations are first timed against each other on the screening set: the memory
plan's smaller input set when the probe made one (problems with more than 64 MiB of input),
else the main set. Every alive combination is timed once per round, in turn, so drift is
common to a round. After ``MIN_PAIRS`` rounds, and every ``LOOK_EVERY`` rounds after that, each
combination is compared with the best so far (the lowest median) by the per-round ratios of
their times: the median ratio has a distribution-free interval from the order statistics
(``stopping.median_interval``, at the strict level ``Z_EARLY`` because it is looked at again
and again), and a combination whose whole interval lies above ``1 + DROP_MARGIN`` is dropped:
it is at least 10% slower than the best, at 99.5% confidence, on this set. Before that, on a
GPU, from the ``FAR_ROUNDS``-th round on, a combination whose every round so far took at least
``FAR`` times the best's time in the same round is dropped at once: far slower than a GPU's
timing noise goes (on the H200 a sweep of level1/54 spent 6 s timing a 633 ms combination ten
times beside a 16 ms one). Not on the CPU, whose rounds a loaded machine can stretch that
much (a 2x slower combination measured 5.5x in a round under the test suite's load).
Screening ends when
``keep`` combinations are left; when it is settled: every one left is within 10% of the best at
that confidence (the rule can drop none of them however long it times, so more rounds would only
rank near-equals); or at its budget (on a GPU never before ``MIN_PAIRS`` rounds, so the rule can
act) or round cap; the ``keep`` fastest by median
are the finalists, which alone are checked and timed at full size against the reference by the
usual interleaved method (``timing.py``). Every combination's row says where it was screened,
how it did and, when it was dropped, why.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from openkernel.evaluation.worker.stopping import MIN_PAIRS, Z_EARLY, median_interval

_perf_counter = time.perf_counter
FINALISTS = 3  # combinations timed at full size (the winner is among them)
DROP_MARGIN = 0.10  # "clearly slower": the whole 99.5% interval at least 10% above the best
LOOK_EVERY = 5  # rounds between two looks once MIN_PAIRS rounds are in
FAR = 3.0  # at least this many times the best's time in every round: dropped at once
FAR_ROUNDS = 2  # ... once this many rounds are in


@dataclass
class Screen:
    """What screening found: samples (ms) per key, why each dropped one was, the finalists.

    A drop is ``{"why": "slower", "rounds", "vs": the best's key, "ratio_ci": [lo, hi]}``,
    ``{"why": "far_slower", "rounds", "vs", "ratio_min"}`` (every round at least ``FAR`` times
    the best's) or ``{"why": "not_finalist", "rounds"}`` (the engine words it, with parameters
    for keys).
    """

    samples: dict[Any, list[float]] = field(default_factory=dict)
    dropped: dict[Any, dict] = field(default_factory=dict)
    finalists: list = field(default_factory=list)
    rounds: int = 0
    stop_reason: str = ""


def screen(timer, fns: dict[Any, Callable[[], Any]], budget_s: float, max_rounds: int,
           keep: int = FINALISTS, min_rounds: int = MIN_PAIRS, warmup: int = 0,
           far: float | None = None) -> Screen:
    """Time ``fns`` round by round, dropping the clearly slower ones (module docstring).

    Args:
        timer: The worker's ``Timer`` (its ``time_once`` and ``_sync``).
        fns: One callable per combination, keyed by the combination.
        budget_s: Wall-clock budget of the screening rounds.
        max_rounds: Cap on the rounds.
        keep: How many finalists to return.
        min_rounds: Rounds before the budget may end screening (``MIN_PAIRS`` on a GPU, so the
            rule can act; 1 under the interpreter, where every call is slow and means little).
        warmup: Untimed calls of each before the first round (0: the caller's first calls and
            checks warmed them).
        far: Drop at once what is this many times the best's time in each of the rounds so far
            (from ``FAR_ROUNDS`` on; None: never, the CPU's rule).
    """
    out = Screen(samples={k: [] for k in fns})
    alive = list(fns)
    if len(alive) <= keep:
        out.finalists, out.stop_reason = alive, f"{len(alive)} combination(s): all are finalists"
        return out
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    timer._sync()
    deadline = _perf_counter() + budget_s
    out.stop_reason = "round cap"
    while out.rounds < max_rounds:
        for key in alive:
            out.samples[key].append(timer.time_once(fns[key]))
        timer._sync()
        out.rounds += 1
        looked = out.rounds >= MIN_PAIRS and (out.rounds - MIN_PAIRS) % LOOK_EVERY == 0
        if looked:
            alive = _drop(out, alive)
        elif far and FAR_ROUNDS <= out.rounds < MIN_PAIRS:
            alive = _drop_far(out, alive, far)
        if len(alive) <= keep:
            out.stop_reason = f"{len(alive)} left"
            break
        if looked and settled({k: out.samples[k] for k in alive}):
            out.stop_reason = f"settled: the {len(alive)} left are within " \
                f"{DROP_MARGIN:.0%} of the best"
            break
        if out.rounds >= min_rounds and _perf_counter() > deadline:
            out.stop_reason = "budget"
            break
    ranked = sorted(alive, key=lambda k: statistics.median(out.samples[k]))
    out.finalists = ranked[:keep]
    for key in ranked[keep:]:
        out.dropped[key] = {"why": "not_finalist", "rounds": out.rounds, "keep": keep}
    return out


def _drop_far(out: Screen, alive: list, far: float) -> list:
    """Drop the combinations at least ``far`` times the best's time in every round so far
    (below ``keep`` if need be: a finalist that far behind would only be timed for nothing)."""
    best = min(alive, key=lambda k: statistics.median(out.samples[k]))
    for key in alive:
        ratios = [c / b for c, b in zip(out.samples[key], out.samples[best]) if b > 0]
        if key != best and ratios and min(ratios) >= far:
            out.dropped[key] = {"why": "far_slower", "rounds": out.rounds, "vs": best,
                                "ratio_min": round(min(ratios), 2)}
    return [k for k in alive if k not in out.dropped]


def _drop(out: Screen, alive: list) -> list:
    best = min(alive, key=lambda k: statistics.median(out.samples[k]))
    kept = []
    for key in alive:
        if key == best:
            kept.append(key)
            continue
        ratios = [c / b for c, b in zip(out.samples[key], out.samples[best]) if b > 0]
        interval = median_interval(ratios, Z_EARLY)
        if interval is not None and interval[0] > 1 + DROP_MARGIN:
            out.dropped[key] = {"why": "slower", "rounds": out.rounds, "vs": best,
                                "ratio_ci": [round(interval[0], 3), round(interval[1], 3)]}
        else:
            kept.append(key)
    return kept


def settled(samples: dict[Any, list[float]]) -> bool:
    """True when the fastest by median is known to within the drop rule: every other one is
    either clearly slower (its whole interval of per-round ratios above 1) or within
    ``DROP_MARGIN`` of it (the whole interval below ``1 + DROP_MARGIN``). Samples are per
    round, the same rounds for every key."""
    if len(samples) < 2:
        return True
    best = min(samples, key=lambda k: statistics.median(samples[k]))
    for key, values in samples.items():
        if key == best:
            continue
        ratios = [c / b for c, b in zip(values, samples[best]) if b > 0]
        interval = median_interval(ratios, Z_EARLY)
        if interval is None or not (interval[0] > 1.0 or interval[1] < 1 + DROP_MARGIN):
            return False
    return True
