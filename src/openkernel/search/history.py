"""What a branch's past says to its next prompt.

Each branch (``i<N>-b<M>``, the same M across iterations) is a line of attempts. Its failures
since its last correct candidate are fed back into its next prompt (their condensed logs and
code), and while nothing in the archive is correct the latest of them is the branch's parent,
so the model fixes its own bug instead of starting over from the reference. Candidates never
judged (no kernel came back, not run here, an evaluator fault) say nothing about code and are
passed over. The reference's latest measured runtime goes into a prompt whose parent is the
reference. When the best stops improving, the run's log says what became of the candidates
after it (:func:`stalled`).
"""

from __future__ import annotations

from openkernel.records import TaskProbe
from openkernel.schemas import NOT_JUDGED, Program, Status
from openkernel.wording import speedup_text as speed_text

FAILURES_SHOWN = 2  # a branch's recent failures in its next prompt (besides its parent)
_OK = (Status.FASTER, Status.CORRECT)


def branch_failures(judged_in: dict[int, list[Program]], branch: int,
                    before: int) -> list[Program]:
    """The branch's failures (with code) from iterations before ``before``, since its last
    correct candidate, most recent first; code seen twice is listed once."""
    out, codes = [], set()
    for iteration in sorted((i for i in judged_in if i < before), reverse=True):
        for p in reversed(judged_in[iteration]):
            if p.metadata.get("branch") != branch:
                continue
            if p.status in _OK:
                return out
            if p.status in NOT_JUDGED or not p.code.strip() or p.code in codes:
                continue
            codes.add(p.code)
            out.append(p)
            if len(out) > FAILURES_SHOWN:  # one more: the first may be the parent
                return out
    return out


def reference_timing(judged_in: dict[int, list[Program]], probe: TaskProbe,
                     hardware: str) -> tuple[float, str]:
    """The reference's latest median runtime in ms and how it was measured; (0, "") when it
    was never timed."""
    for iteration in sorted(judged_in, reverse=True):
        for p in reversed(judged_in[iteration]):
            stats = p.kernel_exec_result.runtime_stats if p.kernel_exec_result else {}
            median = (stats.get("reference") or {}).get("median") or 0.0
            if median > 0:
                return median, f"timed beside {p.label} on {hardware}"
    if probe.reference_ms > 0:
        return probe.reference_ms, f"a few calls when the task was probed, on {hardware}"
    return 0.0, ""


def stalled(judged_in: dict[int, list[Program]], best: Program | None, last: int,
            exhausted: str = "") -> str:
    """Why the search stopped improving, in words, when the best was found before the last
    iteration ("" otherwise): what became of the candidates after it (slower than their
    parents, below the best, failed) and, when said, that the generator's space ran out."""
    if best is None or best.is_program0 or last < 1 or best.iteration_found >= last:
        return ""
    by_id = {p.id: p for ps in judged_in.values() for p in ps}
    after = [p for i, ps in judged_in.items() if i > best.iteration_found for p in ps]
    if not after:
        return ""
    told: dict[str, int] = {}
    for p in after:
        speed = p.kernel_exec_result.runtime_improvement if p.kernel_exec_result else -1.0
        parent = by_id.get(p.parent_id or "")
        was = (parent.kernel_exec_result.runtime_improvement
               if parent is not None and parent.kernel_exec_result else 1.0)
        if p.status in _OK and speed > 0:
            why = "slower than their parent" if speed < was else "faster than their parent, not the best"
        else:
            why = p.status.value.replace("_", " ")
        told[why] = told.get(why, 0) + 1
    words = ", ".join(f"{n} {why}" for why, n in sorted(told.items(), key=lambda kv: -kv[1]))
    speed = best.kernel_exec_result.runtime_improvement if best.kernel_exec_result else -1.0
    return (f"The best ({best.label}, {speed_text(speed)}) has not improved since iteration "
            f"{best.iteration_found}: of the {len(after)} candidates after it, {words}"
            + (f"; and {exhausted}" if exhausted else "") + ".")
