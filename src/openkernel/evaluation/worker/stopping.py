"""When to stop timing: once the comparison is decided, not when a fixed budget runs out.

Reference (A) and candidate (B) are timed in interleaved pairs, so each pair gives one ratio
``a_i / b_i`` (the candidate's speedup in that round; drift common to both cancels). The median
of those ratios has a distribution-free confidence interval from the order statistics (the
number of ratios below the true median is Binomial(n, 1/2)), with no assumption on the shape
of the timing noise: GPU timings are skewed and have outliers.

Timing stops early when the interval, at a strict level because it is looked at again and
again (``Z_EARLY``), lies wholly on one side of 1.0 (faster or slower than the reference) or
within ``TIE_BAND`` of it (a tie, however long one times), and the same holds against the
incumbent best's speedup when there is one. Otherwise the budget or the trial cap ends it.
The reported interval is the 95% one; a speedup whose interval holds 1.0 is a tie: inside the
measured noise, so not "faster".
"""

from __future__ import annotations

import math
import statistics

Z_REPORT = 1.96  # 95%, two-sided: the interval reported with the result
Z_EARLY = 2.81  # 99.5%, two-sided: a stricter level for a test repeated as trials accrue
TIE_BAND = 0.01  # an interval within 1% of a ratio has decided that the two are the same
MIN_PAIRS = 10  # fewer ratios than this give no interval worth stopping on
CHECK_EVERY = 10  # rounds between two looks (each look sorts the ratios)
# The reference's baselines are timed until each compiled one's ratio to eager is known this
# closely (half the 99.5% interval, relative): the bench's tie rule scales a kernel's interval
# by torch.compile's ratio, so that ratio needs to be well inside the 1% tie band. On the H200
# the baselines' 2 s budget was a fixed cost of every problem timed anew (kb-s21: 7-12.7 s for
# eager and compile, their compilation included).
BASELINE_BAND = 0.0025


def median_interval(values: list[float], z: float = Z_REPORT) -> tuple[float, float] | None:
    """A distribution-free interval for the median of ``values`` (None when too few)."""
    n = len(values)
    if n < MIN_PAIRS:
        return None
    ordered = sorted(values)
    half = z * math.sqrt(n) / 2
    lo = max(int(math.floor(n / 2 - half)), 0)
    hi = min(int(math.ceil(n / 2 + half)), n - 1)
    return ordered[lo], ordered[hi]


def speedups(reference: list[float], candidate: list[float]) -> list[float]:
    """Per-round speedups of the candidate over the reference (pairs timed back to back)."""
    return [a / b for a, b in zip(reference, candidate) if a > 0 and b > 0]


def _side(interval: tuple[float, float], against: float) -> str | None:
    lo, hi = interval
    if lo > against:
        return "faster"
    if hi < against:
        return "slower"
    if against * (1 - TIE_BAND) <= lo and hi <= against * (1 + TIE_BAND):
        return "tie"
    return None


def decided(reference: list[float], candidate: list[float], incumbent: float = 0.0) -> str | None:
    """The reason to stop now ("faster", "slower" or "tie" than the reference, with the
    incumbent's verdict when one is given), or None while the comparison is still open."""
    interval = median_interval(speedups(reference, candidate), Z_EARLY)
    if interval is None:
        return None
    vs_ref = _side(interval, 1.0)
    if vs_ref is None:
        return None
    said = _say(vs_ref, "the reference")
    if incumbent > 0:
        vs_best = _side(interval, incumbent)
        if vs_best is None:
            return None
        said += ", " + _say(vs_best, "the best so far")
    return said


def baselines_settled(samples: dict[str, list[float]]) -> str | None:
    """The reason to stop timing the baselines (eager and the compiled ones, interleaved), or
    None while any compiled baseline's per-round ratio to eager (eager alone: its own median)
    is not yet known within ``BASELINE_BAND``."""
    eager = samples.get("eager") or []
    others = [name for name in samples if name != "eager"]
    series = {name: speedups(eager, samples[name]) for name in others} or {"eager": eager}
    for values in series.values():
        interval = median_interval(values, Z_EARLY)
        if interval is None:
            return None
        mid = statistics.median(values)
        if mid <= 0 or max(interval[1] - mid, mid - interval[0]) > BASELINE_BAND * mid:
            return None
    what = "every baseline's ratio to eager" if others else "eager's median"
    return f"{what} known within {BASELINE_BAND:.2%}"


def _say(side: str, other: str) -> str:
    return f"a tie with {other}" if side == "tie" else f"{side} than {other}"


def verdict(reference: list[float], candidate: list[float]) -> dict:
    """What joins the candidate's runtime statistics: the 95% interval of its speedup and
    whether that interval holds 1.0 (a tie with the reference)."""
    interval = median_interval(speedups(reference, candidate), Z_REPORT)
    if interval is None:
        return {"speedup_ci": None, "tie": False}
    lo, hi = interval
    return {"speedup_ci": [lo, hi], "tie": lo <= 1.0 <= hi}
