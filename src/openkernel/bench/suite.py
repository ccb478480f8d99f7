"""Running a suite: one job per problem, one after the other, all named after the suite.

Every problem's job is named after the suite, so running the same suite again resumes it:
problems whose job completed are skipped, an interrupted one resumes at its missing
candidates (the search's own resume), the rest run. Each problem's reference is timed eager
and under torch.compile on a GPU, also when no candidate could be made for it, so the table
has a baseline for every problem.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from openkernel import events as ev
from openkernel.bench.problems import Problem
from openkernel.runner import resolve_run
from openkernel.schemas import Status
from openkernel.search.control import RunControl
from openkernel.search.loop import Search
from openkernel.store import Store


@dataclass
class ProblemOutcome:
    """What running one problem did in this invocation (the summary reads the database)."""

    problem: Problem
    status: str  # completed | failed | stopped | skipped (completed before)
    candidates: int = 0
    evaluator_faults: int = 0
    seconds: float = 0.0
    error: str = ""
    baseline_error: str = ""
    log: list[str] = field(default_factory=list)


def open_store(problems: list[Problem], overrides: list[str]) -> Store:
    """The suite's database (``paths.kernels_db_path`` as the first problem's config has it)."""
    _, config = resolve_run(problems[0].path, list(overrides))
    return Store(config.paths.kernels_db_path)


def run_suite(problems: list[Problem], suite: str, overrides: list[str], store: Store,
              on_event: Callable[[Problem, ev.Event], None] | None = None,
              control: RunControl | None = None,
              retry_failed: bool = False) -> Iterator[ProblemOutcome]:
    """Run (or resume) every problem of the suite; yields each one's outcome as it ends.

    A resumed suite skips the problems whose job completed and, unless ``retry_failed``, those
    that failed for a reason of their own (no candidate could be made for them, a bad task):
    running them again with the same config would end the same way.
    """
    for position, problem in enumerate(problems):
        if control is not None and control.stopped:
            return
        # The table's strongest baseline is on unless the user's overrides say otherwise.
        task, config = resolve_run(problem.path, ["eval_config.max_autotune_baseline=true",
                                                  *overrides, f"job_name={suite}",
                                                  f"task_name={problem.name}"])
        store.add_suite_problem(suite=suite, task_name=problem.name, job_name=suite,
                                position=position, path=str(problem.path), task_digest=task.digest)
        if store.job_finished(problem.name, suite) or (
                not retry_failed and store.suite_outcome(suite, problem.name) == "failed"):
            yield ProblemOutcome(problem, "skipped")
            continue
        t0 = time.monotonic()
        outcome = ProblemOutcome(problem, "failed")
        search = Search(task, config, control or RunControl(), store)
        for event in search.run():
            if on_event is not None:
                on_event(problem, event)
            if isinstance(event, ev.CandidateEvaluated):
                outcome.candidates += 1
                outcome.evaluator_faults += event.status is Status.EVALUATOR_FAULT
            elif isinstance(event, ev.LogEmitted) and event.level == "error":
                outcome.log.append(event.message)
            elif isinstance(event, ev.RunFinished):
                outcome.status, outcome.error = event.reason, event.error or ""
        evaluator = search.evaluator
        if evaluator.hardware.device == "cuda" and evaluator.probe().ok and \
                evaluator.baselines() is None:
            outcome.baseline_error = evaluator.baseline_error or "no reference timing"
        outcome.seconds = time.monotonic() - t0
        reason = outcome.error or "; ".join(outcome.log[:1])
        store.set_suite_outcome(suite, problem.name, outcome.status,
                                "\n".join(x for x in (reason, outcome.baseline_error) if x))
        store.checkpoint()  # the database file alone now holds the suite so far
        yield outcome
