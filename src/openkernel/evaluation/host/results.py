"""Turning what a worker reported (or how it died) into an EvalResult.

perf_score follows the ladder in schemas.py: 0 nothing usable (build failed or timed out),
1 built, 2 ran, 3 correct on every seed, in-place rewritten inputs and held-out shapes,
4 correct and faster than eager, 5 faster than torch.compile as well. An integrity violation
makes the candidate INCORRECT whatever its timings (runtime_improvement stays -1).
"""

from __future__ import annotations

import signal

from openkernel.records import Hardware, TaskProbe
from openkernel.roofline import roofline_ms
from openkernel.schemas import (
    PERF_COMPILED,
    PERF_CORRECT,
    PERF_FASTER,
    PERF_FASTER_THAN_COMPILE,
    PERF_NONE,
    PERF_RAN,
    EvalResult,
)
from openkernel.wording import speedup_text

CPU_TIMING = "wall clock, Triton interpreter (CPU)"
ROOFLINE_MARGIN = 0.8  # a kernel faster than 80% of the roofline minimum is too good to be true
# On the CPU the Triton interpreter runs each program of a grid as NumPy calls: it is rarely
# faster than PyTorch's own CPU kernels, and this many times faster only when the timed calls did
# not do the work (a call-counting cheat read 570-652x before every timed call was checked).
CPU_PLAUSIBLE = 25.0


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "killed"
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def evaluator_fault(meta: dict, where: str, kind: str, error: str, lines: list[str]) -> EvalResult:
    """A result that blames the evaluator, not the candidate (status ``evaluator_fault``)."""
    meta["evaluator_fault"] = {"where": where, "kind": kind, "error": error[-4000:]}
    lines.insert(0, f"Evaluator fault (not the candidate's): {kind.replace('_', ' ')} while "
                 f"{where}. The candidate was not judged.")
    return EvalResult(compiled=False, correctness=False, metadata=meta, perf_score=-1,
                      eval_log="\n".join(lines))


def from_worker(payload: dict | None, *, phase: str, timed_out: str | None,
                returncode: int | None, log_tail: str, hw: Hardware, probe: TaskProbe | None,
                compile_ratio: float | None, limits: dict) -> EvalResult:
    """Build the EvalResult for one candidate from the worker's payload (None if it died)."""
    meta: dict = {"hardware": hw.label, "device": hw.device, "phase_reached": phase}
    lines: list[str] = []
    if payload and payload.get("memory"):
        meta["memory"] = payload["memory"]
    if payload and payload.get("compile"):
        meta["compile"] = payload["compile"]
    if payload and payload.get("fault"):
        fault = payload["fault"]
        lines.extend(payload.get("log", []))
        lines.append(fault.get("error", ""))
        result = evaluator_fault(meta, fault.get("where", "?"), fault.get("kind", "error"),
                                 fault.get("error", ""), lines)
        result.compiled = bool(payload.get("compiled"))
        return result
    if phase == "setup" and (timed_out or payload is None or "fatal" in payload):
        # Nothing of the candidate had run yet: the worker itself failed to start its job.
        what = (f"timed out after {limits['build_timeout_s']:g} s" if timed_out else
                (payload or {}).get("fatal") or f"died ({describe_exit(returncode)})")
        if log_tail.strip():
            lines.append("Last lines of the worker's output:\n" + log_tail.rstrip())
        return evaluator_fault(meta, "starting the worker", "worker", what, lines)
    if timed_out or payload is None or "fatal" in payload:
        # A build timeout in the first call means its kernels never finished compiling.
        compiled = phase in ("warmup", "queued", "test", "benchmark") and timed_out != "build"
        if timed_out:
            meta["timeout"] = timed_out
            limit = limits["build_timeout_s" if timed_out == "build" else "test_timeout_s"]
            doing = "compiling kernels" if timed_out == "build" and phase not in ("setup", "build") \
                else f"the {phase} phase"
            lines.append(f"{'Build' if timed_out == 'build' else 'Test'} timeout: the worker spent "
                         f"{limit:g} s of {'build' if timed_out == 'build' else 'test'} time "
                         f"(it was in {doing}) and was killed.")
        elif payload is None:
            lines.append(f"The worker died during the {phase} phase ({describe_exit(returncode)}) "
                         "without reporting a result.")
        else:
            lines.append(f"The worker failed during the {phase} phase: {payload['fatal']}")
        if payload and payload.get("log"):
            lines.extend(payload["log"])
        if log_tail.strip():
            lines.append("Last lines of the worker's output:\n" + log_tail.rstrip())
        return EvalResult(compiled=compiled, correctness=False, metadata=meta,
                          perf_score=(PERF_RAN if phase == "benchmark" else PERF_COMPILED)
                          if compiled else PERF_NONE, eval_log="\n".join(lines))

    p = payload
    for key in ("integrity_violation", "integrity_checks", "heldout_ok", "heldout_source",
                "confinement", "weights_copied", "runnable", "kernels", "precision_flags",
                "comparison", "timed_calls"):
        if key in p:
            meta[key] = p[key]
    meta["timing_method"] = CPU_TIMING if hw.device == "cpu" else p.get("timing_method", "")
    if p.get("errors"):
        meta["max_rel_error"] = max(e.get("rel_error", 0.0) for e in p["errors"])
        meta["max_abs_error"] = max(e.get("max_abs_error", 0.0) for e in p["errors"])
    lines.extend(p.get("log", []))
    result = EvalResult(compiled=bool(p.get("compiled")), correctness=bool(p.get("correctness")),
                        metadata=meta)
    if meta.get("runnable") is False:
        result.perf_score = PERF_COMPILED if result.compiled else PERF_NONE
    elif not result.compiled:
        result.perf_score = PERF_NONE
    elif not p.get("ran"):
        result.perf_score = PERF_COMPILED
    elif not result.correctness or meta.get("integrity_violation"):
        result.correctness = False
        result.perf_score = PERF_RAN
    else:
        result.perf_score = PERF_CORRECT
    cand, ref = p.get("cand_stats"), p.get("ref_stats")
    if cand and cand.get("n_trials"):
        result.runtime = cand["median"]
        result.runtime_stats = {**cand, "unit": "ms", "reference": ref or {}}
        if result.correctness and ref and ref.get("n_trials") and cand["median"] > 0:
            result.runtime_improvement = ref["median"] / cand["median"]
            faster = result.runtime_improvement > 1.0 and not cand.get("tie")
            if faster:
                result.perf_score = PERF_FASTER
            if compile_ratio:
                result.improve_over_compile = compile_ratio * result.runtime_improvement
                if result.improve_over_compile > 1.0 and faster:
                    result.perf_score = PERF_FASTER_THAN_COMPILE
            lines.append(f"runtime {cand['median']:.4f} ms (median of {cand['n_trials']}, "
                         f"CV {cand['cv']:.2%}), reference {ref['median']:.4f} ms: "
                         f"{speedup_text(result.runtime_improvement)} ({meta['timing_method']})"
                         + _interval_note(cand))
        _roofline(result, probe, hw, lines)
    if p.get("confinement"):
        lines.append(f"sandbox: {p['confinement']}")
    if log_tail.strip() and not result.correctness:
        lines.append("Last lines of the worker's output:\n" + log_tail.rstrip())
    result.eval_log = "\n".join(lines)
    return result


def _interval_note(cand: dict) -> str:
    ci = cand.get("speedup_ci")
    if not ci:
        return ""
    note = f"; speedup 95% interval {ci[0]:.3f}-{ci[1]:.3f}x"
    if cand.get("tie"):
        note += ": a tie with the reference (within the measured noise)"
    if cand.get("stop_reason"):
        note += f"; timing stopped: {cand['stop_reason']}"
    return note


def _roofline(result: EvalResult, probe: TaskProbe | None, hw: Hardware, lines: list[str]) -> None:
    """The roofline bound of a correct result, and why it is too good to be true when it is
    (``metadata.too_good``): on a GPU a runtime below ``ROOFLINE_MARGIN`` of the bound, on the CPU
    a speedup over the reference past ``CPU_PLAUSIBLE``. The executor then judges it once more
    with fresh inputs, and :func:`flag` keeps one that is so again out of every ranking."""
    if probe is None or not probe.ok or not result.correctness:
        return
    if hw.device != "cuda":
        if result.runtime_improvement > CPU_PLAUSIBLE:
            result.metadata["too_good"] = (
                f"{speedup_text(result.runtime_improvement)} over the reference on the CPU, past "
                f"the {CPU_PLAUSIBLE:g}x a kernel under the Triton interpreter can plausibly reach")
        return
    dtype = probe.output_dtypes[0].replace("torch.", "") if probe.output_dtypes else "float32"
    bound = roofline_ms(probe.flops, probe.bytes_moved, hw, dtype)
    if bound is None:
        return
    result.metadata["roofline_ms"] = bound
    if result.runtime < ROOFLINE_MARGIN * bound:
        result.metadata["too_good"] = (
            f"{result.runtime:.4g} ms, below {ROOFLINE_MARGIN:.0%} of the roofline minimum of "
            f"{bound:.4g} ms for {probe.flops:.3g} FLOPs and {probe.bytes_moved:.3g} bytes")


def flag(result: EvalResult, first: EvalResult) -> EvalResult:
    """A result too good to be true on its second judgement as on its first: kept with what was
    measured (``metadata.flagged_for_review``: why, the runtime, the speedups, the first
    judgement's), as :attr:`Status.FLAGGED`, never correct, so never the best, an elite or a
    bench's winner; its speedups read -1, as an incorrect kernel's."""
    why = result.metadata.pop("too_good")
    result.metadata["flagged_for_review"] = {
        "why": why, "runtime_ms": result.runtime, "speedup": result.runtime_improvement,
        "over_compile": result.improve_over_compile, "first_runtime_ms": first.runtime,
        "first_speedup": first.runtime_improvement}
    result.eval_log += (f"\nFLAGGED FOR REVIEW: {why}, judged twice, on fresh inputs the second "
                        f"time (first {first.runtime:.4g} ms, "
                        f"{speedup_text(first.runtime_improvement)}): too good to be true. Kept "
                        "for a person to review, never the best kernel.")
    result.correctness = False
    result.runtime_improvement = result.improve_over_compile = -1.0
    result.perf_score = PERF_RAN
    return result
