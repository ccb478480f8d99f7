"""Judging a templated candidate: every combination screened, the winner fully judged.

The engine instantiated the combinations from the template's text (``openkernel.templating``);
a ``sweep`` worker builds them side by side, checks each on the screening set (the memory
plan's smaller input set, else the main set), screens the correct ones against each other
there, dropping the clearly slower ones early, and checks and times only the finalists at full
size together with the reference in one GPU turn (``worker/sweep.py``, ``worker/screening.py``).
The fastest correct finalist then gets the whole evaluation of any candidate (every seed,
held-out shapes, integrity, profile), in the sweep's worker (``Evaluator.adopt``) or, where
it could not be judged there, in a worker of its own. ``EvalResult.template_results`` keeps every combination:
its parameters, status, runtime statistics and speedup (finalists), its screening statistics
(``screen_stats``) and, when screening dropped it, why (``dropped``), or why it failed; and
``screen``: the set screened on, the rounds, why screening stopped, the finalists and the rule.
"""

from __future__ import annotations

import hashlib

from openkernel.schemas import EvalResult, Status
from openkernel.templating import Space, Variant, label
from openkernel.wording import speedup_text


DROP_RULE = ("a combination is dropped once the 99.5% interval of the median of its per-round "
             "time ratio to the best so far lies wholly above 1.10 (after at least 10 rounds), "
             "or, on a GPU, at once when each of its first rounds (2 or more) took it at least "
             "3x the best's time; the 3 fastest left are the finalists")


def _dropped(drop: dict, variants: list[Variant]) -> str:
    """Why screening dropped a combination, in words (``worker/screening.py``'s record)."""
    vs = drop.get("vs", len(variants))
    best = label(variants[vs].params) if vs < len(variants) else "the best"
    if drop.get("why") == "far_slower":
        rounds = drop["rounds"]
        return (f"dropped after {rounds} screening round{'s' if rounds > 1 else ''}: at least "
                f"{drop['ratio_min']:.1f}x the time of {best} in every one (far past timing "
                "noise)")
    if drop.get("why") == "slower":
        lo, hi = drop["ratio_ci"]
        return (f"dropped after {drop['rounds']} screening rounds: {lo:.2f}-{hi:.2f}x the time of "
                f"{best} (99.5% interval of the per-round ratio, over the 1.10x bar)")
    return (f"not among the {drop.get('keep', 3)} fastest after {drop['rounds']} screening "
            "rounds (not clearly slower than the best), so not timed at full size")


def _row(variant: Variant, screened: dict, ref_median: float | None,
         variants: list[Variant] = ()) -> dict:
    stats = screened.get("stats") or {}
    if screened.get("fault"):  # the sweep's own doing (worker/sweep.py), not the combination's
        status = Status.EVALUATOR_FAULT.value
    elif not screened.get("built"):
        status = Status.COMPILE_ERROR.value
    elif not screened.get("correct"):
        status = Status.INCORRECT.value
    else:
        status = Status.CORRECT.value
    row = {"params": variant.params, "status": status, "runtime_stats": stats,
           "runtime": stats.get("median", -1.0), "speedup": -1.0,
           "error": (screened.get("fault") or screened.get("error") or "")[-1500:]}
    if screened.get("screen"):
        row["screen_stats"] = screened["screen"]  # on the screening set (module docstring)
    if screened.get("dropped"):
        row["dropped"] = _dropped(screened["dropped"], variants)
    if status == Status.CORRECT.value and ref_median and stats.get("median"):
        row["speedup"] = ref_median / stats["median"]
        if row["speedup"] > 1.0 and not stats.get("tie"):  # inside the noise: a tie, correct
            row["status"] = Status.FASTER.value
    return row


def how_judged(results: dict) -> str:
    """What was done with a sweep's combinations, in one sentence (the log's and the
    dashboard's): screened and timed, or (CUDA C++ without a GPU) compiled only."""
    rows = results.get("combinations", [])
    judged = len(rows)
    screen = results.get("screen") or {}
    if results.get("compiled_only"):
        what = " compiled only (nvcc or NVRTC): no GPU here to run them."
    elif screen:
        dropped = sum(1 for r in rows if r.get("dropped"))
        finalists = sum(1 for r in rows if r.get("runtime_stats"))
        what = (f" checked and screened on {screen['set']}"
                + (f" ({screen['rounds']} rounds)" if screen.get("rounds") else "")
                + f"; {dropped} dropped, {finalists} finalist(s) checked at full size "
                "and timed together with the reference.")
    else:
        what = " screened on one input set and timed together."
    return (f"{judged} combination(s) of {results.get('space_size', judged)}"
            + (f" (a sample: over max_template_combinations={results.get('bound')})"
               if results.get("sampled") else "") + what)


def judged_text(results: dict) -> str:
    """What the winner's full checks made of it beside the screen's quick figure, e.g.
    "judged 0.131x in full; the sweep's timing read 0.185x" ("" before the winner was judged)."""
    judged = results.get("winner_judged") or {}
    row = next((r for r in results.get("combinations", []) if r["params"] == results.get("winner")), None)
    if not judged or row is None:
        return ""
    screen = f"the sweep's timing read {speedup_text(row['speedup'])}"
    if judged["speedup"] > 0:
        return f"judged {speedup_text(judged['speedup'])} in full; {screen}"
    return f"{judged['status']} in its full checks; {screen}"


def summary_lines(results: dict) -> list[str]:
    """A few lines on a sweep for the log (and so for later prompts)."""
    rows = results.get("combinations", [])
    dropped = [r for r in rows if r.get("dropped")]
    lines = [f"Template: {how_judged(results)}"]
    ranked = sorted((r for r in rows if r["speedup"] > 0), key=lambda r: -r["speedup"])
    for r in ranked[:5]:
        mark = " <- winner" if r["params"] == results.get("winner") else ""
        lines.append(f"  {label(r['params'])}: {r['runtime']:.3g} ms, {speedup_text(r['speedup'])}{mark}")
    if len(ranked) > 5:
        lines.append(f"  ... {len(ranked) - 5} more correct, slowest {speedup_text(ranked[-1]['speedup'])}")
    for r in dropped:
        lines.append(f"  {label(r['params'])}: {r['dropped']}")
    for r in rows:
        if r["status"] in (Status.COMPILE_ERROR.value, Status.INCORRECT.value,
                           Status.EVALUATOR_FAULT.value):
            first = next((ln for ln in r["error"].splitlines() if ln.strip()), r["status"])
            lines.append(f"  {label(r['params'])}: {r['status']}: {first[:160]}")
    return lines


def judge_template(evaluator, space: Space, variants: list[Variant], sampled: bool, bound: int,
                   backend: str, label_: str, on_phase=None) -> tuple[EvalResult, str | None]:
    """(the result, the winner's concrete code or None when no combination is correct)."""
    hw = evaluator.hardware
    n = len(variants)
    if hw.device != "cuda" and backend == "cuda":
        return _nvcc_only(evaluator, space, variants, sampled, bound, label_)
    key = hashlib.sha256("\0".join(v.code for v in variants).encode()).hexdigest()
    job = evaluator._task_job(hw.device, "sweep", backend=backend,
                              correctness_seeds=1, gpu_arch=evaluator.targets.primary,
                              build_timeout_s=evaluator.ec.build_timeout_s * max(1.0, n / 4),
                              gpu_memory_fraction=evaluator.ec.gpu_memory_fraction,
                              build_threads=max(1, min(n, 8)), plan=evaluator.plan.to_json(),
                              winner_seeds=evaluator.ec.correctness_seeds,
                              **evaluator._bench_params(hw))
    cache = evaluator.build_cache(key, backend)
    if on_phase is not None:
        on_phase("sweep")  # one phase for the whole screen; the winner's own phases follow
    judging = []

    def winner_phase(phase: str) -> None:
        """The worker's phases from its winner's judging on (the screen's are one "sweep")."""
        if phase == "judging":
            judging.append(phase)
        elif judging and on_phase is not None:
            on_phase(phase)

    slot = evaluator._acquire()
    try:
        run = evaluator._run(job, hw.device, slot, label=f"{label_} (template)",
                             variants=[v.code for v in variants], build_cache=cache,
                             scale=max(1.0, n / 4), total_s=evaluator.ec.sweep_timeout_s,
                             on_phase=winner_phase)
    finally:
        evaluator._release(slot)
    payload = run.payload or {}
    results = {"space": space.options, "defaults": space.defaults, "space_size": space.size,
               "bound": bound, "sampled": sampled, "combinations": [], "winner": None,
               "sweep_s": round(run.wall_s, 2), "timing_method": payload.get("timing_method", ""),
               "sweep_queued_s": run.phase_seconds().get("queued", 0.0),
               "first_calls_s": payload.get("first_calls_s"),  # the variants' compiles, mostly
               "first_calls_side_by_side": payload.get("first_calls_side_by_side"),
               "first_call_alone": payload.get("first_call_alone"),
               "steps_s": (payload.get("memory") or {}).get("steps_s"),
               # the sweep's own work by what it was doing (the winner's checks: its metadata)
               "spent_s": (payload.get("memory") or {}).get("spent_s"),
               "compile": payload.get("compile"),
               "phase_s": run.phase_seconds(), "worker": payload.get("worker_timing"),
               "timing_stop": payload.get("timing_stop"),
               "shared_weights": bool(payload.get("shared_weights"))}
    if not payload.get("variants"):
        over = (f"ran past its wall (eval_config.sweep_timeout_s = "
                f"{evaluator.ec.sweep_timeout_s:g} s) in {run.phase}" if run.timed_out == "total"
                else f"timed out in {run.phase}")
        why = (payload.get("fault") or {}).get("error") or payload.get("fatal") or (
            over if run.timed_out else "the sweep worker died") + (
            "\n" + run.log_tail if run.log_tail else "")
        built = run.timed_out is not None and run.phase not in ("setup", "build")
        result = EvalResult(compiled=built, perf_score=0, template_results=results,
                            eval_log=f"Template: the sweep of {n} combination(s) failed: {why}")
        if payload.get("fault"):
            result.metadata["evaluator_fault"] = payload["fault"]
        elif run.timed_out:  # its combinations took too long: a timeout, as for any candidate
            result.metadata["timeout"] = "test" if built else "build"
        return result, None
    ref_median = (payload.get("ref_stats") or {}).get("median")
    rows = [_row(v, s, ref_median, variants) for v, s in zip(variants, payload["variants"])]
    results["combinations"] = rows
    results["reference_stats"] = payload.get("ref_stats") or {}
    if payload.get("screen"):
        screen = dict(payload["screen"])
        screen["finalists"] = [variants[i].params for i in screen.get("finalists", [])]
        results["screen"] = {**screen, "drop_rule": DROP_RULE}
    if payload.get("patched"):
        for r in rows:  # the screen cannot be trusted: the full checks of the winner decide
            r["error"] = (r["error"] + "\n" if r["error"] else "") + \
                f"the sweep worker saw replaced functions: {', '.join(payload['patched'])}"
    correct = [(r, v, i) for i, (r, v) in enumerate(zip(rows, variants)) if r["speedup"] > 0 or (
        r["status"] in (Status.CORRECT.value, Status.FASTER.value))]
    if not correct:
        built = any(r["status"] != Status.COMPILE_ERROR.value for r in rows)
        result = EvalResult(compiled=built, correctness=False, perf_score=1 if built else 0,
                            template_results=results)
        result.eval_log = "\n".join(["No combination of the template was correct."]
                                    + summary_lines(results))
        faults = [r for r in rows if r["status"] == Status.EVALUATOR_FAULT.value]
        if faults:  # the evaluator's fault, as a sweep that failed outright: nothing blamed
            result.metadata["evaluator_fault"] = {
                "where": "the sweep", "kind": "out_of_memory",
                "error": f"{len(faults)} of {len(rows)} combination(s) ran out of memory beside "
                         f"the others: {faults[0]['error'][:300]}"}
        return result, None
    best_row, best, index = max(correct, key=lambda rv: rv[0]["speedup"])
    results["winner"] = best.params
    judged = payload.get("winner") or {}
    result = None
    if judged.get("index") == index and judged.get("payload"):
        # Judged in full by the sweep's worker, right after its screen (worker/sweep.py).
        result = evaluator.adopt(run, judged["payload"], best.code, backend, label_, cache,
                                 on_phase, slot)
        if result is not None:  # the sweep's own seconds, less the winner's judging
            results["sweep_s"] = round(run.wall_s - result.metadata["evaluation_s"], 2)
    if result is None:
        # In a worker of its own, in the sweep's build folder: the winner's kernels are there
        # already (the same template, so the same candidate's own files), and its first call
        # loads them instead of compiling.
        result = evaluator.evaluate(best.code, backend, label=label_, on_phase=on_phase,
                                    build_cache=cache)
    # The screen's figure is a quick one; the winner's full timing is the kernel's speedup
    # (issue 58: a table starred 0.185x beside a kernel judged 0.131x): both are kept, named.
    results["winner_judged"] = {"status": result.get_status().value,
                                "speedup": result.runtime_improvement, "runtime": result.runtime}
    result.template_results = results
    result.metadata["template"] = {"params": best.params, "combinations": n,
                                   "space_size": space.size, "sampled": sampled}
    result.eval_log = "\n".join(summary_lines(results)
                                + [f"The winner ({label(best.params)}) had the full checks "
                                   f"({judged_text(results)}):", result.eval_log])
    return result, best.code


def _nvcc_only(evaluator, space: Space, variants: list[Variant], sampled: bool, bound: int,
               label_: str) -> tuple[EvalResult, None]:
    """Without a GPU, CUDA combinations can only be compiled (nvcc or NVRTC): each one is."""
    rows, first = [], None
    for v in variants:
        r = evaluator.evaluate(v.code, "cuda", label=f"{label_} [{label(v.params)}]")
        first = first or r
        rows.append({"params": v.params, "status": r.get_status().value, "runtime_stats": {},
                     "runtime": -1.0, "speedup": -1.0,
                     "error": "" if r.compiled else r.eval_log[-1500:]})
    results = {"space": space.options, "defaults": space.defaults, "space_size": space.size,
               "bound": bound, "sampled": sampled, "combinations": rows, "winner": None,
               "compiled_only": True}
    built = sum(1 for r in rows if r["status"] == Status.NOT_RUN.value)
    result = first.model_copy(deep=True)
    result.template_results = results
    result.eval_log = "\n".join(summary_lines(results) + [f"{built} of {len(rows)} compiled."])
    return result, None
