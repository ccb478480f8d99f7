"""Run health: the seed's "what to do with what you see" table, computed for one job.

Each rule reads only the light kernel rows (status, speedup, profiler data, branch) and says
whether its symptom shows, with the evidence, the likely cause and where to look, so a user
does not have to read the shape of the graph to spot the five usual problems.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from kernelcode.dashboard.graph import best_kernel_id
from openkernel.wording import speedup_text

BUILT = ("incorrect", "test_timeout", "correct", "faster")  # compiled and then judged
CORRECT = ("correct", "faster")
# No verdict on the candidate's code (openkernel.schemas.NOT_JUDGED): never counted as failures.
NOT_JUDGED = ("not_run", "evaluator_fault", "generation_failed")


@dataclass(frozen=True)
class HealthCheck:
    """One row of the table: a symptom and whether this job shows it.

    Attributes:
        symptom: the seed's wording of the symptom.
        state: "warn" when the job shows it, "ok" when it does not, "n/a" when it cannot tell.
        evidence: the numbers behind the state.
        cause: the likely cause, from the seed.
        where: where to look, from the seed.
    """

    symptom: str
    state: str
    evidence: str
    cause: str
    where: str


def _candidates(rows: list[dict]) -> list[dict]:
    """Generated kernels only: the starting program says nothing about the model."""
    gen = [r for r in rows if not r.get("is_program0")]
    return gen or list(rows)


def _measured_profile(row: dict) -> bool:
    data = row.get("profiler_data") or {}
    return bool(data) and not data.get("estimate", False)


def job_health(rows: list[dict], branches_per_iteration: int | None = None) -> list[HealthCheck]:
    """The five checks of the seed's table for one job, then the evaluator's own faults.

    Args:
        rows: light kernel rows of the job (``queries.job_kernels``).
        branches_per_iteration: from the run's config, when it was stored.

    Returns:
        One ``HealthCheck`` per symptom, in the seed's order, then "Generation failed"
        (candidates with no kernel to judge) and last "Evaluator faults": candidates the
        evaluator could not judge because its own code failed (grey, never the candidate's
        failure).
    """
    cands = _candidates(rows)
    n = len(cands)
    status = Counter(r.get("status") for r in cands)
    unjudged = sum(status[s] for s in NOT_JUDGED)
    judged = n - unjudged
    built = sum(status[s] for s in BUILT)
    correct = sum(status[s] for s in CORRECT)
    no_build = status["compile_error"] + status["build_timeout"]
    aside = f"; {unjudged} not judged" if unjudged else ""
    checks = []

    if judged == 0:
        state, ev = "n/a", "no candidate judged yet" + aside
    else:
        state = "warn" if no_build == judged else "ok"
        ev = f"{no_build} of {judged} judged candidates did not build ({status['compile_error']} " \
             f"compile errors, {status['build_timeout']} build timeouts){aside}"
    checks.append(HealthCheck("All red", state, ev, "Build environment or missing includes",
                              "Evaluation log, build errors"))

    tested = status["incorrect"] + status["test_timeout"]
    if tested == 0 and correct == 0:
        state, ev = "n/a", "no candidate reached the correctness tests"
    else:
        state = "warn" if correct == 0 else "ok"
        ev = f"{correct} correct of {built} that compiled and were tested " \
             f"({status['incorrect']} incorrect, {status['test_timeout']} test timeouts)" + (
                 f"; {status['not_run']} compiled but not run here" if status["not_run"] else "")
    checks.append(HealthCheck("Compiles, never correct", state, ev,
                              "Reference mismatch, or tolerances too tight",
                              "Correctness output, assert_allclose usage"))

    if correct == 0:
        state, ev = "n/a", "no correct candidate yet"
    else:
        best_id = best_kernel_id(cands)  # the job's one "best"
        best = next((r.get("runtime_improvement") or -1.0) for r in cands if r["id"] == best_id)
        state = "warn" if status["faster"] == 0 else "ok"
        ev = f"{status['faster']} of {correct} correct candidates are faster; best speedup " + (
            speedup_text(best, missing="not measured"))
    # On the CPU the candidates are Python running each Triton program (the interpreter):
    # slower than PyTorch's own CPU kernels whatever the shape (issue 58: it blamed the shape)
    interpreted = bool(cands) and all("interpreter" in (r.get("hardware") or "").lower()
                                      for r in cands)
    checks.append(HealthCheck(
        "Correct but no speedup", state, ev,
        "The candidates ran in Triton's interpreter on the CPU, which executes each program in "
        "Python and is slower than PyTorch's CPU kernels at any shape: a speedup needs a GPU"
        if interpreted else
        "Reference is already well optimized, or the benchmark shape is too small to show a "
        "difference", "The hardware in the header; run the job on a GPU" if interpreted
        else "Runtime stats, benchmark shapes"))

    ran = [r for r in cands if r.get("status") in CORRECT or r.get("status") == "incorrect"]
    if not ran:
        state, ev = "n/a", "no candidate ran"
    else:
        measured = sum(_measured_profile(r) for r in ran)
        estimated = sum(bool((r.get("profiler_data") or {}).get("estimate")) for r in ran)
        state = "warn" if measured == 0 else "ok"
        ev = f"{measured} of {len(ran)} candidates that ran have profiler data" + (
            f" ({estimated} with estimates only)" if estimated else "")
    checks.append(HealthCheck(
        "No profiler data", state, ev,
        "The candidates ran on the CPU (no GPU profiler there), Nsight Compute (ncu) is not "
        "installed, or eval_config.profile is off",
        "Evaluation log (its Profile lines), eval_config.profile"))

    iterations = {r.get("iteration") for r in cands}
    widest = max(Counter(r.get("iteration") for r in cands).values(), default=0)
    if len(iterations) < 2 and branches_per_iteration is None:
        state, ev = "n/a", "fewer than two iterations so far"
    else:
        single = widest <= 1 if branches_per_iteration is None else branches_per_iteration <= 1
        state = "warn" if single else "ok"
        ev = f"at most {widest} candidate(s) per iteration over {len(iterations)} iterations" + (
            f"; branches_per_iteration = {branches_per_iteration}" if branches_per_iteration else "")
    checks.append(HealthCheck("One lineage, no branches", state, ev,
                              "branches_per_iteration is 1", "Config parameters"))

    failed = status["generation_failed"]
    if n == 0:
        state, ev = "n/a", "no candidates yet"
    else:
        state = "warn" if failed else "ok"
        ev = f"{failed} of {n} candidates got no kernel from the generator"
    checks.append(HealthCheck(
        "Generation failed", state, ev,
        "The model's service answered with an error (after retries), or its answer held no "
        "fenced kernel: nothing was built, and no build status applies",
        "Generation log and Answer of those candidates"))

    faults = status["evaluator_fault"]
    if n == 0:
        state, ev = "n/a", "no candidates yet"
    else:
        state = "warn" if faults else "ok"
        ev = f"{faults} of {n} candidates could not be judged because the evaluator failed" + (
            " (each was retried once with a smaller memory plan)" if faults else "")
    checks.append(HealthCheck(
        "Evaluator faults", state, ev,
        "The evaluator's own checks ran out of device memory, the reference failed, or the "
        "GPU failed before the candidate ran: a fault of openkernel or the machine, not of "
        "the candidate", "Evaluation log (its 'Evaluator fault' line), metadata.evaluator_fault"))
    return checks


def branches_from_config(config: dict | None) -> int | None:
    """``branches_per_iteration`` from a stored run config, wherever the config nests it."""
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("branches_per_iteration"), int):
        return config["branches_per_iteration"]
    for value in config.values():
        found = branches_from_config(value) if isinstance(value, dict) else None
        if found is not None:
            return found
    return None
