"""The one stream of typed events out of the engine.

``openkernel.optimize`` yields these; the TUI, the CLI and scripts consume the same stream.
Each is a small dataclass named for what happened. Everything after the fact lives in the
database; events carry just enough to draw a live view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openkernel.costs import LLMCall, Spend
from openkernel.records import Diagnosis
from openkernel.schemas import Program, Status
from openkernel.wording import Tally


@dataclass(frozen=True)
class Event:
    """Base class of every engine event."""


@dataclass(frozen=True)
class RunStarted(Event):
    run_id: int
    task_name: str
    job_name: str
    backend: str
    hardware: str
    models: tuple[str, ...]
    generator: str  # "llm" or "offline"
    db_path: str
    max_iters: int
    branches_per_iteration: int
    resumed_candidates: int = 0  # candidates already stored for this job (a resumed run; the
    # reference is not a candidate)
    reference_code: str = ""
    skills: tuple = ()  # offline templates matching the task (generators.offline.skill_matches)
    peak_bandwidth_gbs: float | None = None  # hardware ceilings for roofline views
    peak_tflops: dict = field(default_factory=dict)
    max_usd: float | None = None  # the job's budget (budget.max_usd, budget.max_tokens)
    max_tokens: int | None = None
    peak_gflops: float | None = None  # the compute ceiling for this task's dtype
    resumed_tally: Tally | None = None  # the resumed candidates, judged and not


@dataclass(frozen=True)
class IterationStarted(Event):
    iteration: int


@dataclass(frozen=True)
class CandidateStarted(Event):
    label: str
    iteration: int
    branch: int
    parent_id: str | None
    model: str


# Where a candidate in flight is, in order (CandidatePhaseChanged.phase): its generator is
# writing it; it waits for a free worker (or for the run to be resumed); its worker imports
# and compiles it (and makes the first call); it waits for its GPU's turn; its correctness
# tests run; its timed trials run; it is re-run under Nsight Compute. A templated candidate is
# "sweeping" while its combinations are built, screened and timed together, then goes through
# the phases again for the winner's full checks. "abandoned": it will not be judged (an
# internal error, or no GPU left; the log says which).
# "paused": held by a pause before it got a worker (it goes on once resumed)
PHASES = ("generating", "queued", "paused", "sweeping", "building", "waiting_for_gpu", "testing",
          "timing", "profiling", "abandoned")


@dataclass(frozen=True)
class CandidatePhaseChanged(Event):
    """A candidate in flight moved to another phase (one of ``PHASES``)."""

    label: str
    phase: str


@dataclass(frozen=True)
class CandidateWithdrawn(Event):
    """The generator had nothing new for this branch (every combination of its template was
    judged): no candidate, no row; views drop the branch they opened for it."""

    label: str
    reason: str


@dataclass(frozen=True)
class CandidateGenerated(Event):
    """The generator answered: what it plans and why (for the chat panel)."""

    label: str
    model: str
    description: str
    reasoning: str = ""


@dataclass(frozen=True)
class AnswerStreamed(Event):
    """A piece of a model's answer as it arrives (high rate: UIs coalesce these per label).

    ``attempt`` counts the call's tries: a piece of a new attempt starts the answer again.
    """

    label: str
    model: str
    delta: str
    attempt: int = 1


@dataclass(frozen=True)
class ModelCalled(Event):
    """A model call answered: what it used and cost, and the job's totals after it."""

    label: str  # the candidate it served, "" for the critic
    iteration: int
    call: LLMCall
    spend: Spend
    kernel_id: str | None = None  # the candidate's id (None for the critic)


@dataclass(frozen=True)
class BudgetReached(Event):
    """A budget limit was reached: no new candidate starts; those in flight finish."""

    reason: str  # e.g. "budget.max_usd reached: $0.0102 spent of $0.0100"
    spend: Spend


@dataclass(frozen=True)
class CandidateEvaluated(Event):
    program: Program
    status: Status
    label: str
    speedup: float  # runtime_improvement, -1 when not measured
    best_speedup: float  # best correct speedup of the job so far


@dataclass(frozen=True)
class CandidateRestored(Event):
    """A candidate a resumed job stored before this run, told once at its start in the order it
    was stored (after ``RunStarted``, before this run's candidates): a view then shows the whole
    job. Counted in ``RunStarted.resumed_tally`` already, not a new verdict."""

    program: Program
    status: Status
    label: str
    speedup: float
    best_speedup: float  # the job's best after it, as its archive was rebuilt


@dataclass(frozen=True)
class BestImproved(Event):
    program: Program
    previous_speedup: float
    speedup: float


@dataclass(frozen=True)
class IterationFinished(Event):
    iteration: int
    best_speedup: float
    evaluated: int  # the job's candidates stored so far (a resumed job: its earlier runs' too)
    tally: Tally = field(default_factory=Tally)  # the same, judged and not (every view's words)
    # this iteration's candidates: 0 when every branch was withdrawn (nothing new to propose),
    # and then the views show the last iteration that judged something (issue 58)
    judged: int = -1


@dataclass(frozen=True)
class CriticDiagnosed(Event):
    """A diagnosis after an iteration: what limits the best kernel (and each parent handed to
    the next iteration), what to try next. ``text`` is all of it in words."""

    iteration: int
    text: str
    diagnoses: tuple[Diagnosis, ...] = ()


@dataclass(frozen=True)
class RunPaused(Event):
    """Pause asked for: no new candidate starts. Sent at once with the candidates still in
    flight (they finish and are stored), and again with ``in_flight=0`` once none is."""

    in_flight: int = 0


@dataclass(frozen=True)
class RunResumed(Event):
    pass


@dataclass(frozen=True)
class BackendSwitched(Event):
    backend: str
    from_iteration: int


@dataclass(frozen=True)
class InstructionAdded(Event):
    text: str
    from_iteration: int


@dataclass(frozen=True)
class LogEmitted(Event):
    level: str  # "info" | "warning" | "error"
    message: str


@dataclass(frozen=True)
class RunFinished(Event):
    reason: str  # "completed" | "stopped" | "failed"
    best_program_id: str | None
    best_speedup: float
    candidates: int  # the job's candidates now stored (a resumed job: all its runs')
    db_path: str
    error: str | None = None  # why it failed, or why it stopped by itself (a budget)
    extra: dict = field(default_factory=dict)
    spend: Spend | None = None  # the job's model calls, per model (None: no model used)
    new_candidates: int = 0  # of which this run judged
    tally: Tally | None = None  # the job's candidates, judged and not (None: no run started)
    planned: int = 0  # iterations x branches the job was given
    ended_early: str = ""  # why it ended before its last iteration (nothing new to propose)
    # What ended it by itself: "budget" (stopped), "models" (failed: every model failed too
    # many calls in a row, something to fix like a bad key or a dead server), or "".
    stopped_by: str = ""
