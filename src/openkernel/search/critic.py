"""The rule-based critic: what limits a kernel and what to try next.

After each iteration the search asks for a diagnosis of the best kernel and of each parent it
hands to the next iteration (``judge_by_rules``); ``llm_critic`` asks a model instead when one
is configured and falls back to these rules. The rules read a kernel's profiler data when
there is some (Nsight Compute on a GPU) and otherwise place it against the roofline from the
task's FLOPs and minimum bytes, labelled as an estimate. Interpreter timings on the CPU say
nothing about a GPU, and the critic says so.
"""

from __future__ import annotations

import re
from collections import Counter

from openkernel.records import Diagnosis, Hardware, TaskProbe
from openkernel.roofline import roofline_estimate  # noqa: F401 - where the critic's callers look
from openkernel.schemas import NOT_JUDGED, Program, Status
from openkernel.wording import flagged_why, speedup_text

_FIRST_ERROR = re.compile(r"error|exception|mismatch|violation|timed out|exceeded|killed|signal",
                          re.IGNORECASE)


# Why candidates were not judged (schemas.NOT_JUDGED), in the critic's words.
_UNJUDGED = {
    Status.NOT_RUN: "compiled but not run here (CUDA C++ needs a GPU to run)",
    Status.GENERATION_FAILED: "no kernel came back from the generator (see their generation "
                              "logs)",
    Status.EVALUATOR_FAULT: "the evaluator itself failed (see their evaluation logs)",
}


def diagnose(best: Program | None, probe: TaskProbe, hw: Hardware,
             outcomes: Counter | None = None) -> str:
    """One or two sentences about the best kernel, for the chat panel and the dashboard;
    ``outcomes`` counts the job's candidates by status, so candidates never judged are not
    read as failures."""
    return diagnose_kernel(best, "best", probe, hw, outcomes).text


def no_kernel_text(outcomes: Counter | None = None) -> str:
    """What to say while there is no correct kernel: failures to read, or candidates that were
    never judged (not run here, no kernel generated, an evaluator fault), said as such."""
    outcomes = outcomes or Counter()
    unjudged = [f"{outcomes[s]} {why}" for s, why in _UNJUDGED.items() if outcomes[s]]
    failed = sum(n for s, n in outcomes.items() if s not in NOT_JUDGED
                 and s not in (Status.FASTER, Status.CORRECT))
    if unjudged and not failed:
        return "No candidate judged yet: " + "; ".join(unjudged) + "."
    return ("No correct kernel yet. Read the evaluation logs of the failures: build errors "
            "first, then correctness (shapes, dtypes, masks on ragged tails)."
            + (" Not judged: " + "; ".join(unjudged) + "." if unjudged else ""))


def diagnose_kernel(program: Program | None, role: str, probe: TaskProbe,
                    hw: Hardware, outcomes: Counter | None = None) -> Diagnosis:
    """The rules' diagnosis of one kernel (``role`` "best" or "parent"); with none, what the
    job's ``outcomes`` (candidates by status) say."""
    if program is None or program.kernel_exec_result is None:
        return Diagnosis(None, "", role, no_kernel_text(outcomes))
    label = program.metadata.get("label", program.label)
    result = program.kernel_exec_result
    if not result.correctness:
        return Diagnosis(program.id, label, role, _failure_text(program, label, role))
    text, bottleneck, headroom = _speed_text(program, label, role, probe, hw)
    return Diagnosis(program.id, label, role, text, bottleneck, headroom)


def subjects(best: Program | None, parents: list[Program]) -> list[tuple[Program, str]]:
    """The kernels a round of the critic reads: the best, then each distinct judged parent."""
    out, seen = [], set()
    if best is not None:
        out.append((best, "best"))
        seen.add(best.id)
    for parent in parents:
        if parent.id in seen or parent.is_program0 or parent.kernel_exec_result is None:
            continue
        seen.add(parent.id)
        out.append((parent, "parent"))
    return out


def judge_by_rules(best: Program | None, parents: list[Program], probe: TaskProbe,
                   hw: Hardware, outcomes: Counter | None = None) -> list[Diagnosis]:
    """The best kernel's diagnosis (or the generic one, from the job's ``outcomes``), then one
    per judged parent."""
    found = [diagnose_kernel(p, role, probe, hw) for p, role in subjects(best, parents)]
    return found if best is not None else [diagnose_kernel(None, "best", probe, hw, outcomes)] + found


def first_error(log: str, limit: int = 220) -> str:
    """The first line of a log that names what went wrong, clipped."""
    for line in log.splitlines():
        if _FIRST_ERROR.search(line):
            line = " ".join(line.split())
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _failure_text(program: Program, label: str, role: str) -> str:
    label = ("Best so far " if role == "best" else "Parent ") + label
    result = program.kernel_exec_result
    status = program.status
    why = first_error(result.eval_log)
    quoted = f" ({why})" if why else ""
    violation = result.metadata.get("integrity_violation")
    if status == Status.COMPILE_ERROR:
        return f"{label} did not build{quoted}: fix that error first and keep the idea."
    if status == Status.BUILD_TIMEOUT:
        return (f"{label} timed out while building: fewer autotune configs, smaller unrolls or "
                "fewer template instantiations.")
    if status == Status.TEST_TIMEOUT:
        return (f"{label} timed out in the tests: look for a hang or a runaway grid (loop bounds, "
                "the grid size, a missing mask on the last block).")
    if status == Status.NOT_RUN:
        return f"{label} built but could not run on this machine; its speed is unknown."
    if status == Status.EVALUATOR_FAULT:
        return f"{label} was not judged (the evaluator failed, not the kernel){quoted}."
    if status == Status.GENERATION_FAILED:
        return f"{label} has no kernel: generating it failed (see its generation log)."
    if status == Status.FLAGGED:
        return (f"{label} ran faster than the hardware allows ({flagged_why(result.metadata)}): "
                "its timing cannot be trusted, so it is not kept; compute the whole result on "
                "every call.")
    if violation:
        return (f"{label} failed the integrity check {violation}{quoted}: compute the result "
                "with a real kernel on every call, from the inputs given.")
    return (f"{label} gives wrong results{quoted}: check the masks on ragged tails, the index "
            "arithmetic, dtypes and the held-out shapes before any speed work.")


def _speed_text(program: Program, label: str, role: str, probe: TaskProbe,
                hw: Hardware) -> tuple[str, str, float | None]:
    result = program.kernel_exec_result
    speed = result.runtime_improvement
    who = "Best so far " if role == "best" else "Parent "
    head = f"{who}{label}: {speedup_text(speed)} over the reference." if speed > 0 else f"{who}{label}."
    prof = result.profiler_data or {}
    if hw.interpreter:
        return (head + " Timings here are Triton-interpreter timings on the CPU: they rank "
                "candidates only roughly and say nothing about a GPU.",
                "", None)
    if not prof.get("bottleneck"):
        prof = roofline_estimate(result.runtime, probe, hw)
    bottleneck = prof.get("bottleneck")
    if not bottleneck:
        return head + " No profile or hardware ceilings yet, so no bottleneck diagnosis.", "", None
    source = "estimate" if prof.get("estimate") else "profile"
    headroom = prof.get("headroom")
    if bottleneck == "memory_bound":
        pct = prof.get("dram_throughput_pct", 0.0)
        advice = ("near the bandwidth floor: further gains need fewer bytes (fusion, lower "
                  "precision the task allows)" if pct > 80 else
                  "try wider (16-byte) loads, more work per program, and fewer passes over memory")
        text = f"{head} Memory bound ({source}): {pct:.0f}% of peak bandwidth; {advice}."
    elif bottleneck == "compute_bound":
        text = (f"{head} Compute bound ({source}): use the tensor cores (tl.dot / wgmma) with "
                "larger tiles and deeper pipelining (num_stages).")
    else:
        text = (f"{head} Latency bound ({source}): too little work in flight; raise occupancy "
                "or work per program, or use a persistent grid.")
    if headroom:
        text += f" Headroom ~{headroom:.1f}x."
    if program.status == Status.CORRECT:
        text += " It is correct but not faster: the reference may already be near the floor."
    return text, bottleneck, headroom
