"""The reference's baselines: its eager, torch.compile, max-autotune and reduce-overhead (CUDA
graphs) timings, each under a wall of its own, paid once per task, hardware and software.

What determines a baseline is the task's code (its digest), the hardware (its label) and the
software of the workers (torch, Triton and CUDA versions, TF32 and cuDNN flags, Inductor and
Triton settings: ``Hardware.software``, digested into ``environment_key``). Timings stored
under that key are reused by every later job, suite and run (``eval_config.fresh_baselines``
forces new ones); a stored timeout is reused while the wall asked for is less than 1.5 times
the one it ran into (``RETRY_FACTOR``), and tried again under a wall that long or longer.

Timing them (``measure``): one ``reference`` worker makes each baseline in a phase of its own
(worker/reference_timing.py) and the engine holds each phase to its wall
(``eval_config.baseline_timeout_s``). A baseline past its wall is recorded as timed out with
the seconds it ran, and the others are asked for again without it; an eager call past its
wall leaves nothing to compare with, so nothing is timed. The record (stored as the
``runtime_stats`` of the "compile" row) holds each baseline's statistics, ``timed_out``
({name: {elapsed_s, limit_s}}), ``<name>_error`` for a baseline that failed or timed out, and
``measured_s`` (the workers' own seconds).

Two stages. A candidate's verdict needs only eager and compile (its ratio over torch.compile):
those are timed first, beside the first candidates' builds. Max-autotune (it benchmarks its
GEMM and convolution choices on the GPU while it compiles, so it holds the GPU from timed
trials) and reduce-overhead are timed after the search's candidates (``late``): on a 12 GiB
depthwise convolution max-autotune alone held the GPU past a 180 s problem wall, and no
candidate had a verdict (KernelBench level1/84 on the H200). The late stage's own eager
timing (``eager_late``) is what its baselines are compared with: the same interleaved run.
"""

from __future__ import annotations

import threading

from openkernel.config import BASELINES, EvalConfig
from openkernel.records import Hardware, baseline_kind, software_key


def environment_key(hw: Hardware) -> str:
    """Digest of the workers' software ("" when unknown: nothing is stored or reused then)."""
    return software_key(hw.software)


def wanted(ec: EvalConfig, hw: Hardware) -> list[str]:
    """The baselines to make: ``eval_config.baselines``, or eager and compile on a GPU (and
    max-autotune with ``max_autotune_baseline``, reduce-overhead with ``cudagraphs_baseline``),
    none on the CPU."""
    if ec.baselines is not None:
        return list(ec.baselines)
    if hw.device != "cuda":
        return []
    return ["eager", "compile"] + (["autotune"] if ec.max_autotune_baseline else []) + (
        ["cudagraphs"] if ec.cudagraphs_baseline else [])


def walls(ec: EvalConfig, kinds: list[str]) -> dict[str, float]:
    return {kind: getattr(ec.baseline_timeout_s, kind) for kind in kinds}


# A baseline that ran into its wall is timed again only under a wall this much longer: on
# level1/82 and 84 max-autotune stopped at its 37 s share of the problem's wall, and every later
# pass, its share 44 s, tried again for 45 s and stopped again (kb22-s25-b0-stored on the H200).
RETRY_FACTOR = 1.5


def covers(record: dict, limits: dict[str, float]) -> bool:
    """Whether a stored record answers for every baseline asked (a timeout under a wall much
    shorter than today's, ``RETRY_FACTOR``, does not: it is tried again)."""
    if not isinstance(record, dict):
        return False
    timed_out = record.get("timed_out") or {}
    for kind, limit in limits.items():
        if kind in timed_out:
            if float(timed_out[kind].get("limit_s") or 0) * RETRY_FACTOR <= limit:
                return False
        elif kind not in record and f"{kind}_error" not in record:
            return False
    return True


def compile_ratio(record: dict | None) -> float | None:
    """torch.compile's median over eager's, when both were timed."""
    try:
        return record["compile"]["median"] / record["eager"]["median"]
    except (TypeError, KeyError, ZeroDivisionError):
        return None


def notes(record: dict | None) -> str:
    """One line on the baselines that failed or timed out ("" when all were timed)."""
    if not record:
        return ""
    return "; ".join(f"{kind} {record[f'{kind}_error']}".splitlines()[0][:200]
                     for kind in BASELINES if f"{kind}_error" in record)


def capped(ec: EvalConfig, kinds: list[str], within_s: float | None) -> dict[str, float]:
    """The walls, each at most its share of ``within_s`` (the phases run one after the other;
    at least 1 s each), or as configured when there is no such bound."""
    limits = walls(ec, kinds)
    if within_s is None or not kinds:
        return limits
    share = max(1.0, round(within_s / len(kinds), 1))
    return {kind: min(limit, share) for kind, limit in limits.items()}


def measure(ev, hw: Hardware, kinds: list[str],
            within_s: float | None = None) -> tuple[dict | None, str, float]:
    """Time the baselines in ``reference`` workers, each phase under its wall (and all of them
    within ``within_s`` seconds when given: what is left of a problem's own wall).

    Returns (the record, or None when the worker failed otherwise; why; the workers' own
    seconds, waiting for the GPU not counted). Raises the evaluator's Aborted once it is stopped.
    """
    configured = walls(ev.ec, kinds)
    limits = capped(ev.ec, kinds, within_s)
    record: dict = {"baselines": list(kinds), "timed_out": {}}
    left, own = list(kinds), 0.0
    while left:
        job = ev._task_job(hw.device, "reference", baselines=left, **ev._bench_params(hw))
        slot = ev._acquire()  # a GPU of the primary target; the timed rounds take its turn
        try:
            run = ev._run(job, hw.device, slot, label="reference-baselines",
                          walls={k: limits[k] for k in left})
        finally:
            ev._release(slot)
        phases = run.phase_seconds()
        own += run.wall_s - phases.get("queued", 0.0)
        kind = run.timed_out
        if kind in limits:  # one baseline past its wall: the others are asked for again
            seconds = phases.get(kind, 0.0)
            record["timed_out"][kind] = {"elapsed_s": round(seconds, 1), "limit_s": limits[kind]}
            wall = (f"eval_config.baseline_timeout_s.{kind} = {limits[kind]:g}"
                    if limits[kind] >= configured[kind] else
                    f"its share of the {within_s:.0f} s left before the problem's wall")
            record[f"{kind}_error"] = f"timed out: stopped after {seconds:.0f} s ({wall})"
            left.remove(kind)
            if kind == "eager":
                for other in left:
                    record[f"{other}_error"] = "not timed: the reference's eager call ran past its wall"
                break
            continue
        payload = run.payload or {}
        if "eager" not in payload:
            what = (f"timed out in {run.phase}" if run.timed_out else payload.get("fatal")
                    or f"the worker died (exit {run.returncode})")
            return None, f"timing the reference's baselines failed: {what}", own
        record.update({k: v for k, v in payload.items() if k != "worker_timing"})
        break
    record["measured_s"] = round(own, 2)
    return record, "", own


FIRST = ("eager", "compile")  # what a candidate's ratio over torch.compile needs


class ReferenceBaselines:
    """One evaluator's baselines: read from the store or measured, once per stage
    (thread-safe): ``FIRST`` before the verdicts, the rest after the candidates."""

    def __init__(self, ev):
        self.ev = ev
        self.record: dict | None = None
        self.error = ""  # why there is no record
        # baselines_s (0 when stored) and baselines_stored: the first stage, paid before the
        # verdicts; late_baselines_s: the late stage's
        self.costs: dict = {}
        self._lock = threading.Lock()
        self._done: set[str] = set()

    def get(self, hw: Hardware, late: bool = True, within_s: float | None = None) -> dict | None:
        """The record (None when no baseline is asked for, or timing failed); ``late``: with
        the late stage too (timed now if it was not, within ``within_s`` seconds if given)."""
        with self._lock:
            kinds = wanted(self.ev.ec, hw)
            first = [k for k in kinds if k in FIRST]
            stages = [("first", first), ("late", [k for k in kinds if k not in FIRST])]
            for name, stage in stages if late else stages[:1]:
                if name in self._done or (name == "late" and self.error):
                    continue  # (a failed first stage leaves nothing to add to)
                self._done.add(name)
                if stage:
                    self._stage(hw, name, stage, within_s if name == "late" else None)
            return self.record

    def pending(self, hw: Hardware) -> list[str]:
        """The late stage's baselines while it is still to be timed (else none)."""
        if "late" in self._done:
            return []
        return [k for k in wanted(self.ev.ec, hw) if k not in FIRST]

    def _stage(self, hw: Hardware, name: str, kinds: list[str], within_s: float | None) -> None:
        ev = self.ev
        key, store, digest = environment_key(hw), ev.store, ev.task.digest
        row = None
        if store is not None and key:
            row = store.reference_timing(digest, hw.label, baseline_kind(ev.ec.allow_tf32), key)
        stored = row.runtime_stats if row is not None and isinstance(row.runtime_stats, dict) \
            else None
        cost = "baselines_s" if name == "first" else "late_baselines_s"
        if stored is not None and not ev.ec.fresh_baselines and \
                covers(stored, capped(ev.ec, kinds, within_s)):
            self.record = self._merged(stored, kinds) if self.record is not None else stored
            self.costs[cost] = 0.0
            if name == "first":
                self.costs["baselines_stored"] = True
            return
        record, error, own = measure(ev, hw, kinds, within_s)
        self.costs[cost] = round(own, 2)
        if name == "first":
            self.costs["baselines_stored"] = False
        if record is None:
            if name == "first":
                self.error = error
            elif self.record is not None:  # the first stage's timings stand
                for kind in kinds:
                    self.record[f"{kind}_error"] = error
            return
        self.record = record if name == "first" or self.record is None else \
            self._merged(record, kinds)
        if store is not None and key:  # (the first stage alone, then the whole record)
            median = (self.record.get("compile") or self.record.get("eager") or {}).get(
                "median", -1.0)
            store.put_reference_timing(digest, hw.label, baseline_kind(ev.ec.allow_tf32), median,
                                       self.record, key)

    def _merged(self, late: dict, kinds: list[str]) -> dict:
        """The first stage's record with ``kinds`` taken from ``late`` (a late record's own
        eager as ``eager_late``: its baselines' ratios are to the eager timed beside them)."""
        out = dict(self.record or {})
        out["baselines"] = list(dict.fromkeys(list(out.get("baselines") or []) + kinds))
        timed_out = dict(out.get("timed_out") or {})
        for kind in kinds:
            for key in (kind, f"{kind}_error"):
                if key in late:
                    out[key] = late[key]
            if kind in (late.get("timed_out") or {}):
                timed_out[kind] = late["timed_out"][kind]
        out["timed_out"] = timed_out
        eager = late.get("eager_late") or late.get("eager")
        if eager is not None:
            out["eager_late"] = eager
        for key in ("autotune_mode", "cudagraphs_mode"):
            if key in late:
                out[key] = late[key]
        return out
