"""Timing the reference and a candidate the same way (runs inside a worker process).

Method on a GPU (what ``metadata["timing_method"]`` calls "cuda events, L2 flushed"):

* warm-up rounds first (Triton compiles at the first call; that belongs to the build phase),
  timed like the others and not kept: they give the host's launch time of each call and the
  time of a round, which sizes the trial count;
* before every timed call a 256 MB buffer is zeroed so neither kernel finds its inputs in
  L2 (the H200's L2 is 50 MB) - the same policy as ``triton.testing.do_bench`` - and the GPU
  is then kept busy (``torch.cuda._sleep``) for three times the host's measured launch time
  of the call (at least ~100 us) so the call is queued before the device reaches it: what is
  timed is device time, not the host's launch overhead (first H200 run: without it a ~8 us
  Triton kernel measured 8 to 30 us depending on the process);
* each call is bracketed by CUDA events on the current stream, and the device is synchronised
  (all streams) after every A/B pair, so work left on a side stream cannot spill into the next
  trial; integrity.hidden_work compares the events with the profiler's kernel time to catch
  work hidden on another stream;
* the callables alternate A B A B so clock and thermal drift cancel; a round may start with
  ``prepare()`` and each call be followed by ``check(name, output)``, both outside the
  measurement: the benchmark (``benchmark.py``) draws each round's input set there and checks
  every timed call's output;
* the trial count adapts: fast kernels get more trials, bounded by a time budget, and with
  ``stop`` the loop ends as soon as the comparison is decided (``stopping.py``);
* the median is the runtime; mean, std, min, max, CV and the trial count are kept.

Without a GPU the same loop runs with ``time.perf_counter`` (captured before candidate code is
imported) around each call; under ``TRITON_INTERPRET=1`` those are interpreter timings.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

_perf_counter = time.perf_counter
FLUSH_BYTES = 256 * 1024 * 1024
SLEEP_CYCLES = 200_000  # ~100 us at the H200's ~2 GHz
CYCLES_PER_US = 2_000
MAX_SLEEP_CYCLES = 20_000_000  # 10 ms: a launch slower than that is the candidate's problem


def summarize(samples_ms: list[float]) -> dict[str, float]:
    """Median, mean, std, min, max, coefficient of variation and trial count."""
    if not samples_ms:
        return {"n_trials": 0}
    mean = statistics.fmean(samples_ms)
    std = statistics.pstdev(samples_ms) if len(samples_ms) > 1 else 0.0
    return {
        "median": statistics.median(samples_ms),
        "mean": mean,
        "std": std,
        "min": min(samples_ms),
        "max": max(samples_ms),
        "cv": std / mean if mean > 0 else 0.0,
        "n_trials": len(samples_ms),
    }


class Timer:
    """Times callables on one device with the method described in the module docstring."""

    def __init__(self, device: str, sync: Callable[[], None] | None = None,
                 event_cls: Any = None):
        self.device = device
        self.gpu = device.startswith("cuda")
        # Private references (taken before the candidate is imported) so patches cannot reach.
        self._sync = sync or (torch.cuda.synchronize if self.gpu else (lambda: None))
        self._event = event_cls or (torch.cuda.Event if self.gpu else None)
        self._flush = (torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
                       if self.gpu else None)
        self.sleep_cycles = SLEEP_CYCLES
        self.stop_reason = ""

    @property
    def method(self) -> str:
        if self.gpu:
            return "cuda events per call, L2 flushed (256 MB), launch queued ahead, A/B interleaved, median"
        return "wall clock (time.perf_counter), A/B interleaved, median"

    def time_once(self, fn: Callable[[], Any]) -> float:
        """One timed call in milliseconds (L2 flushed first on a GPU)."""
        return self.timed(fn)[0]

    def timed(self, fn: Callable[[], Any]) -> tuple[float, float, Any]:
        """One timed call: its milliseconds, the host's microseconds to issue it (on a GPU,
        what the queued-launch sleep must cover) and what it returned."""
        if not self.gpu:
            t0 = _perf_counter()
            out = fn()
            ms = (_perf_counter() - t0) * 1e3
            return ms, ms * 1e3, out
        self._flush.zero_()
        # Keep the GPU busy ~100 us more, so the host has queued start, the call and end
        # before the GPU reaches them: host launch overhead (Triton's launcher is slow) stays
        # out of the measurement, as with CUDA graphs, and the events time only device work.
        torch.cuda._sleep(self.sleep_cycles)
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        start.record()
        t0 = _perf_counter()
        out = fn()
        host_us = (_perf_counter() - t0) * 1e6
        end.record()
        self._sync()
        return start.elapsed_time(end), host_us, out

    def interleaved(self, fns: dict[str, Callable[[], Any]], budget_s: float,
                    min_trials: int, max_trials: int, warmup: int = 3,
                    stop: Callable[[dict[str, list[float]]], str | None] | None = None,
                    check_every: int = 10, prepare: Callable[[], None] | None = None,
                    check: Callable[[str, Any], None] | None = None) -> dict[str, list[float]]:
        """Time every callable in turn (A B A B ...) for up to ``budget_s`` seconds.

        Returns the samples in milliseconds per name. The trial count is
        ``budget_s / (time of one round)``, clamped to ``[min_trials, max_trials]``; the loop
        also stops early once the budget is spent (but never before ``min_trials``), or when
        ``stop(samples)`` gives a reason (looked at every ``check_every`` rounds). Why it
        stopped is left in ``self.stop_reason``. ``prepare()`` starts each round and
        ``check(name, output)`` follows each call, the warm-up's too: the time of a round
        that sizes the trial count is a warm-up round's wall time, theirs included, so the
        budget bounds the whole.
        """
        self.stop_reason = "trial cap"
        host: dict[str, list[float]] = {name: [] for name in fns}

        def one_round(into: dict[str, list[float]]) -> None:
            if prepare is not None:
                prepare()
            for name, fn in fns.items():
                ms, us, out = self.timed(fn)
                into[name].append(ms)
                host[name].append(us)
                if check is not None:
                    check(name, out)
                del out
            self._sync()  # device-wide: nothing from this round leaks into the next

        warm: dict[str, list[float]] = {name: [] for name in fns}
        walls = []
        for _ in range(max(warmup, 1)):
            t0 = _perf_counter()
            one_round(warm)
            walls.append((_perf_counter() - t0) * 1e3)
        round_ms = min(walls)  # the first rounds may still pay first-time costs
        if self.gpu:
            host_us = max(statistics.median(v) for v in host.values())
            self.sleep_cycles = int(min(max(3 * host_us * CYCLES_PER_US, SLEEP_CYCLES),
                                        MAX_SLEEP_CYCLES))
        per_round_ms = sum(statistics.median(v) for v in warm.values())
        # flush + the queued-launch sleep + event bookkeeping per call
        overhead_ms = 0.1 + self.sleep_cycles / CYCLES_PER_US / 1e3 if self.gpu else 0.01
        per_round_ms = max(per_round_ms + overhead_ms * len(fns), round_ms)
        n = int(budget_s * 1e3 / max(per_round_ms, 1e-6))
        n = max(min_trials, min(max_trials, n))
        samples: dict[str, list[float]] = {name: [] for name in fns}
        deadline = _perf_counter() + budget_s
        for trial in range(n):
            one_round(samples)
            if trial + 1 < min_trials:
                continue
            if _perf_counter() > deadline:
                self.stop_reason = "budget"
                break
            if stop is not None and (trial + 1) % check_every == 0:
                reason = stop(samples)
                if reason:
                    self.stop_reason = f"decided: {reason}"
                    break
        return samples
