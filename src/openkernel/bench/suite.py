"""Running a suite: one job per problem, one after the other, all named after the suite.

Every problem's job is named after the suite, so running the same suite again resumes it:
problems whose job completed are skipped, an interrupted one resumes at its missing
candidates (the search's own resume), the rest run. Each problem's reference is timed eager
and under torch.compile on a GPU, also when no candidate could be made for it, so the table
has a baseline for every problem (or the reason it has none).

With a problem timeout, a problem still running past it is ended: its workers are stopped,
what was judged stays stored, the candidates cut short are not (no candidate is blamed), and
the problem is filed as ``timed_out`` before the next one starts. The wall is also the
search's deadline: max-autotune and reduce-overhead, timed after the candidates, get only what
is left of it, so a problem whose candidates are all judged ends inside its wall.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from openkernel import events as ev
from openkernel.bench.problems import Problem
from openkernel.evaluation.host.executor import Aborted
from openkernel.runner import resolve_run
from openkernel.schemas import Status
from openkernel.search.control import RunControl
from openkernel.search.loop import Search
from openkernel.store import Store


@dataclass
class ProblemOutcome:
    """What running one problem did in this invocation (the summary reads the database)."""

    problem: Problem
    status: str  # completed | failed | stopped | timed_out | skipped (ended before)
    candidates: int = 0
    evaluator_faults: int = 0
    seconds: float = 0.0
    error: str = ""
    baseline_error: str = ""
    log: list[str] = field(default_factory=list)
    # probe_s, baselines_s, baselines_stored, fixed_s; problem_s: all of it, wall clock
    costs: dict = field(default_factory=dict)


class _Wall:
    """A problem's time limit: past it, the search stops and its evaluator ends its workers."""

    def __init__(self, seconds: float, search: Search):
        self.seconds, self.fired = seconds, False
        self._timer = threading.Timer(seconds, self._fire, args=(search,))
        self._timer.daemon = True
        self._timer.start()

    def _fire(self, search: Search) -> None:
        self.fired = True
        search.control.stop()
        abort = getattr(search.evaluator, "abort", None)  # the Ray executor only stops
        if abort is not None:
            abort(f"the problem ran past --problem-timeout {self.seconds:g} s")

    def cancel(self) -> None:
        self._timer.cancel()


def open_store(problems: list[Problem], overrides: list[str]) -> Store:
    """The suite's database (``paths.kernels_db_path`` as the first problem's config has it)."""
    _, config = resolve_run(problems[0].path, list(overrides))
    return Store(config.paths.kernels_db_path)


def run_suite(problems: list[Problem], suite: str, overrides: list[str], store: Store,
              on_event: Callable[[Problem, ev.Event], None] | None = None,
              control: RunControl | None = None,
              retry_failed: bool = False,
              problem_timeout: float | None = None) -> Iterator[ProblemOutcome]:
    """Run (or resume) every problem of the suite; yields each one's outcome as it ends.

    A resumed suite skips the problems whose job completed and, unless ``retry_failed``, those
    that failed for a reason of their own (no candidate could be made for them, a bad task) or
    ran past ``problem_timeout`` seconds: running them again with the same config would end the
    same way.
    """
    for position, problem in enumerate(problems):
        if control is not None and control.stopped:
            return
        # The table's strongest baselines are on unless the user's overrides say otherwise.
        task, config = resolve_run(problem.path, ["eval_config.max_autotune_baseline=true",
                                                  "eval_config.cudagraphs_baseline=true",
                                                  *overrides, f"job_name={suite}",
                                                  f"task_name={problem.name}"])
        store.add_suite_problem(suite=suite, task_name=problem.name, job_name=suite,
                                position=position, path=str(problem.path), task_digest=task.digest)
        if store.job_finished(problem.name, suite) or (
                not retry_failed and store.suite_outcome(suite, problem.name) in ("failed",
                                                                                 "timed_out")):
            yield ProblemOutcome(problem, "skipped")
            continue
        t0 = time.monotonic()
        outcome = ProblemOutcome(problem, "failed")
        search = Search(task, config, RunControl(parent=control), store)
        wall = _Wall(problem_timeout, search) if problem_timeout else None
        if problem_timeout:
            search.deadline = t0 + problem_timeout
        try:
            _follow(search, problem, outcome, on_event)
            evaluator = search.evaluator
            # the baselines also when no candidate asked for them (the table has them)
            wanted = evaluator.hardware.device == "cuda" or config.eval_config.baselines
            if not (wall and wall.fired) and wanted and evaluator.probe().ok and \
                    evaluator.baselines() is None and evaluator.baseline_error:
                outcome.baseline_error = evaluator.baseline_error
        except Aborted:  # the probe or the baselines were cut short by the wall
            pass
        finally:
            if wall is not None:
                wall.cancel()
        outcome.seconds = time.monotonic() - t0
        outcome.costs = {**getattr(search.evaluator, "costs", {}),
                         "problem_s": round(outcome.seconds, 1)}
        if wall is not None and wall.fired:
            outcome.status = "timed_out"
            outcome.error = (f"ran past --problem-timeout {problem_timeout:g} s: stopped with "
                             f"{outcome.candidates} candidate(s) judged (stored); the ones in "
                             "flight were not judged")
        reason = outcome.error or "; ".join(outcome.log[:1])
        store.set_suite_outcome(suite, problem.name, outcome.status,
                                "\n".join(x for x in (reason, outcome.baseline_error) if x))
        store.set_suite_costs(suite, problem.name, outcome.costs)
        store.checkpoint()  # the database file alone now holds the suite so far
        yield outcome


def _follow(search: Search, problem: Problem, outcome: ProblemOutcome,
            on_event: Callable[[Problem, ev.Event], None] | None) -> None:
    """Run the problem's search to its end, counting into ``outcome``."""
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
