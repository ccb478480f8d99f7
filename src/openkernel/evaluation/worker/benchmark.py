"""The benchmark's rounds: every timed call is a checked call.

A search keeps whatever the evaluator calls fastest, so a kernel that computes honestly only
while it is checked must never be called faster. On the H200 a GELU that counted its calls and,
past its first ones, returned its previous answer was judged 9.76x over eager (the honest one
1.52x): the timed loop fed one input set over and over and looked at no timed output. So each
round of :meth:`Rounds.run` does, outside what the timer measures:

1. ``prepare``: draw a fresh input set from a seed the candidate cannot know (the OS's random
   source, drawn when the round starts: no set exists before its round, so none can be worked
   out ahead), and fingerprint the tensors the reference will run on;
2. the candidate's timed call, first: no answer for these inputs exists in the process yet;
3. ``check("candidate")``: the per-call checks of any checked call (a thread or process left
   running, a kernel launched, on the timed stream, plain outputs, the precision flags) and the
   reference's inputs unchanged;
4. the reference's timed call on the same inputs;
5. ``check("reference")``: the candidate's output against the reference's, by the same
   comparison as the correctness seeds, and its error against the largest the same kernel
   showed on the checked seeds (``DRIFT`` times, at least ``FLOOR_EPS`` units of the dtype's
   rounding): a kernel that computes in half precision only when timed passes float32
   tolerances but not this; then the reference's answer is poisoned (NaN) and freed.

Memory: one input set at a time, as in the correctness checks (a pristine copy for a reference
that writes into its inputs), the two outputs and a comparison's blocks: within the memory
plan's share for a seed's check. Time: per round, making the inputs, two fingerprints of them,
one comparison and one fill, all untimed; the round's wall time sizes the trial count, so the
budget bounds the whole (README, "Evaluation").
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import torch

from openkernel.evaluation.worker import integrity as ig
from openkernel.evaluation.worker import stopping
from openkernel.evaluation.worker.correctness import compare_outputs, flatten_outputs
from openkernel.evaluation.worker.task_runtime import clone, tensors_in

DRIFT = 16  # a timed call's error may be this many times the largest seen when checked...
FLOOR_EPS = 512  # ...or this many units of its dtype's rounding (float32: 6.1e-5), the larger


class Rounds:
    """The state of one benchmark: the round in hand and what the checked calls showed."""

    def __init__(self, ev):
        self.ev = ev
        self.tol = ev.rt.hook("get_tolerances")
        seen = [e.get("rel_error", 0.0) for e in ev.payload.get("errors", [])]
        self.checked_error = max(seen, default=0.0)
        self.round = 0
        self.seed = 0
        self.inputs: list | None = None
        self.ref_in: list | None = None
        self.marks: list | None = None
        self.before = None
        self.outs: list | None = None
        self.worst = 0.0
        self.spent = {"inputs": 0.0, "checks": 0.0}

    # -- the timed calls ----------------------------------------------------------------
    def candidate(self) -> Any:
        return self.ev.forward(self.inputs)

    def reference(self) -> Any:
        with self.ev.ours("timing the reference", timed=True):
            return self.ev.caller(self.ev.ref_model, self.ref_in)

    # -- around them (untimed) ----------------------------------------------------------
    def where(self) -> str:
        return f"timed call {self.round} (an input set of its own, seed {self.seed:#x})"

    def prepare(self) -> None:
        ev, t0 = self.ev, time.perf_counter()
        self.round += 1
        self.seed = secrets.randbits(62)
        self.inputs = self.ref_in = None
        with ev.ours("making the timed calls' inputs"):
            self.inputs = ev.rt.inputs(self.seed)
            self.ref_in = clone(self.inputs) if ev.plan.keep_pristine else self.inputs
            self.marks = ev.fingerprints.of_all(tensors_in(self.ref_in))
        self.before = ev.before_call()
        self.spent["inputs"] += time.perf_counter() - t0

    def check(self, name: str, out: Any) -> None:
        t0 = time.perf_counter()
        try:
            if name == "candidate":
                self._candidate(out)
            else:
                self._compare(out)
        finally:
            self.spent["checks"] += time.perf_counter() - t0

    def _candidate(self, out: Any) -> None:
        ev = self.ev
        try:
            self.outs = ev.after_call(self.before, out)
        except ig.IntegrityViolation as v:
            raise ig.IntegrityViolation(v.check, f"{self.where()}: {v}") from v
        with ev.ours("checking the timed call's inputs"):
            changed = ev.fingerprints.of_all(tensors_in(self.ref_in)) != self.marks
        if changed:
            which = "the copy of its inputs the reference runs on" if ev.plan.keep_pristine \
                else "its inputs"
            raise ig.IntegrityViolation("inputs_modified", f"{self.where()}: forward changed "
                                        f"{which}")

    def _compare(self, out: Any) -> None:
        ev, outs = self.ev, self.outs
        with ev.ours("comparing a timed call's outputs"):
            ref_outs = flatten_outputs(out)
            del out
            ok, msg, stats = compare_outputs(outs, ref_outs, self.tol, ev.chunk)
        if not ok:
            named = ev.explained(self.where(), msg, outs, stats)
            if named:
                raise ig.IntegrityViolation(*named)
            raise ig.IntegrityViolation("timed_calls", f"{self.where()}: {msg}; the same kernel "
                                        "matched the reference on every checked input set")
        error = stats.get("rel_error", 0.0)
        limit = self._limit(ref_outs)
        if error > limit:
            raise ig.IntegrityViolation(
                "timed_calls", f"{self.where()}: relative error {error:.3g} against the "
                f"reference, above {limit:.3g} ({DRIFT}x the {self.checked_error:.3g} this kernel "
                "showed on the checked input sets): it computes less exactly when timed")
        self.worst = max(self.worst, error)
        with ev.ours("retiring the reference outputs"):
            ev.retire(ref_outs)
        del ref_outs
        self.outs = self.inputs = self.ref_in = None

    def _limit(self, ref_outs: list) -> float:
        floating = [t.dtype for t in ref_outs if t.is_floating_point()]
        eps = torch.finfo(floating[0]).eps if floating else 0.0
        return max(DRIFT * self.checked_error, FLOOR_EPS * eps)

    # -- the whole --------------------------------------------------------------------
    def run(self) -> tuple[dict[str, list[float]], dict]:
        """The samples (candidate and reference, in ms) and the record of the checked calls."""
        ev, job = self.ev, self.ev.job
        incumbent = job.incumbent_speedup

        def stop(s):
            return stopping.decided(s["reference"], s["candidate"], incumbent)

        samples = ev.timer.interleaved(
            {"candidate": self.candidate, "reference": self.reference},
            budget_s=job.bench_budget_s, min_trials=job.min_trials, max_trials=job.max_trials,
            stop=stop if job.adaptive_trials else None, check_every=stopping.CHECK_EVERY,
            prepare=self.prepare, check=self.check)
        record = {"checked": True, "calls": self.round, "input_sets": self.round,
                  "max_rel_error": self.worst, "checked_rel_error": self.checked_error,
                  "inputs_s": round(self.spent["inputs"], 3),
                  "checks_s": round(self.spent["checks"], 3)}
        return samples, record


def unchecked(ev) -> tuple[dict[str, list[float]], dict]:
    """The timing without the rounds' checks (``eval_config.check_timed_calls: false``): one
    input set for every call, no timed output looked at. Only to measure what the checks cost;
    such a result says it was not checked."""
    job = ev.job
    with ev.ours("generating the benchmark inputs"):
        inputs = ev.rt.inputs(1)
        ref_in = clone(inputs) if ev.plan.keep_pristine else inputs

    def reference():
        with ev.ours("timing the reference", timed=True):
            return ev.caller(ev.ref_model, ref_in)

    def stop(s):
        return stopping.decided(s["reference"], s["candidate"], job.incumbent_speedup)

    samples = ev.timer.interleaved(
        {"candidate": lambda: ev.forward(inputs), "reference": reference},
        budget_s=job.bench_budget_s, min_trials=job.min_trials, max_trials=job.max_trials,
        stop=stop if job.adaptive_trials else None, check_every=stopping.CHECK_EVERY)
    return samples, {"checked": False}
