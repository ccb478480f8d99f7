"""RunState: the live view of one search, folded from the engine's events.

Pure data, no Textual: the widgets draw from it and the tests can check it directly. It
mirrors what the events say and decides nothing about the search itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelcode.tui.formatting import is_error
from openkernel import events as ev
from openkernel.costs import Spend
from openkernel.schemas import NOT_JUDGED, Program, Status
from openkernel.wording import Tally


@dataclass(frozen=True)
class RunCouldNotStart:
    """The task or config was rejected before the search began (an OpenKernelError)."""

    message: str


@dataclass(frozen=True)
class RunCrashed:
    """The engine raised something that is not an OpenKernelError: a bug, kept with its trace."""

    message: str
    traceback: str = ""


@dataclass(frozen=True)
class RunResolved:
    """The task and config resolved (the app's own event): the reference for the kernel diff."""

    task_name: str
    reference_code: str


@dataclass
class Candidate:
    """One row of the Experiment Log."""

    label: str
    iteration: int
    branch: int
    model: str = ""
    description: str = ""
    program: Program | None = None
    status: Status | None = None  # None while in flight
    speedup: float = -1.0
    mark: str = ""  # "keep" | "discard" | "error" | "not_judged", once evaluated
    phase: str = ""  # while in flight: one of openkernel.events.PHASES
    generated: bool = False  # the generator answered (the candidate is being judged)
    answer: str = ""  # the model's answer as streamed so far (the whole of it once generated)
    attempt: int = 0  # the call's attempt the streamed answer belongs to (0: nothing streamed)

    @property
    def streaming(self) -> bool:
        """Streamed and not yet judged: the chat shows it live."""
        return self.attempt > 0 and self.status is None


@dataclass
class RunState:
    """Everything the panels show, updated one event at a time by :meth:`apply`."""

    started: ev.RunStarted | None = None
    finished: ev.RunFinished | None = None
    phase: str = "starting"  # starting | running | finished | stopped | failed | error
    problem: str = ""
    backend: str = "triton"
    iteration: int = -1  # 0-based like the i<N> labels; -1 before the first iteration
    max_iters: int = 0
    candidates: dict[str, Candidate] = field(default_factory=dict)
    evaluated: list[Candidate] = field(default_factory=list)
    best: Program | None = None
    best_speedup: float = -1.0
    # Best program before each candidate was judged, so the kernel diff can compare a candidate
    # with the best it was up against.
    best_before: dict[str, Program | None] = field(default_factory=dict)
    trajectory: list[float] = field(default_factory=list)  # best speedup after each candidate
    marks: dict[str, int] = field(
        default_factory=lambda: {"keep": 0, "discard": 0, "error": 0, "not_judged": 0})
    error: str = ""
    reference_code: str = ""
    spend: Spend | None = None  # the job's model calls so far (None: no model called yet)
    budget_reached: str = ""  # why a budget stopped the job, once it did
    streams_version: int = 0  # bumped by every streamed piece, so the chat redraws only then
    resumed: Tally = field(default_factory=Tally)  # the job's candidates stored before this run
    in_flight: int = 0  # paused, with this many candidates still finishing

    def apply(self, event: object) -> list[Candidate]:
        """Fold one event in; returns the Experiment Log rows it touched."""
        handler = getattr(self, f"_on_{type(event).__name__}", None)
        touched = handler(event) if handler else None
        if touched is None:
            return []
        return touched if isinstance(touched, list) else [touched]

    # -- handlers, one per event type that changes what is shown ------------------------------
    def _on_RunStarted(self, e: ev.RunStarted) -> None:
        self.started, self.phase = e, "running"
        self.problem, self.backend, self.max_iters = e.task_name, e.backend, e.max_iters
        self.resumed = e.resumed_tally or Tally(e.resumed_candidates)

    def _on_CandidateWithdrawn(self, e: ev.CandidateWithdrawn) -> None:
        self.candidates.pop(e.label, None)  # the generator had nothing new: no candidate

    def _on_RunPaused(self, e: ev.RunPaused) -> None:
        self.in_flight = e.in_flight

    def _on_RunResumed(self, _: ev.RunResumed) -> None:
        self.in_flight = 0

    def _on_RunResolved(self, e: RunResolved) -> None:
        self.problem, self.reference_code = e.task_name, e.reference_code

    def _on_IterationStarted(self, e: ev.IterationStarted) -> None:
        self.iteration = e.iteration

    def _on_CandidateStarted(self, e: ev.CandidateStarted) -> Candidate:
        row = Candidate(e.label, e.iteration, e.branch, model=e.model)
        self.candidates[e.label] = row
        return row

    def _on_CandidatePhaseChanged(self, e: ev.CandidatePhaseChanged) -> Candidate:
        row = self._row(e.label)
        row.phase = e.phase
        return row

    def _on_CandidateGenerated(self, e: ev.CandidateGenerated) -> Candidate:
        row = self._row(e.label)
        row.description, row.model = e.description or row.description, e.model or row.model
        row.generated = True
        self.streams_version += bool(row.attempt)  # its live box now says "judging"
        return row

    def _on_AnswerStreamed(self, e: ev.AnswerStreamed) -> None:
        row = self._row(e.label)
        if e.attempt != row.attempt:  # a retry starts the answer again
            row.answer, row.attempt = "", e.attempt
        row.answer += e.delta
        row.model = e.model or row.model
        self.streams_version += 1

    def _on_ModelCalled(self, e: ev.ModelCalled) -> None:
        self.spend = e.spend

    def _on_BudgetReached(self, e: ev.BudgetReached) -> None:
        self.budget_reached, self.spend = e.reason, e.spend

    def _on_CandidateEvaluated(self, e: ev.CandidateEvaluated) -> Candidate:
        row = self._row(e.label, e.program)
        p = e.program
        row.program, row.status, row.speedup = p, e.status, e.speedup
        if row.attempt:
            self.streams_version += 1  # its live answer collapses
        row.description = row.description or str(p.metadata.get("description") or "")
        row.model = row.model or str(p.metadata.get("model") or "")
        self.best_before[row.label] = self.best
        # A keep is a candidate that became the job's best (the best correct candidate, never
        # the reference, as the engine's archive says): the first correct one is a keep.
        improved = (e.status in (Status.FASTER, Status.CORRECT) and e.speedup > 0
                    and e.speedup >= e.best_speedup > self.best_speedup)
        if improved:
            self.best, self.best_speedup = p, e.speedup
        row.mark = ("not_judged" if e.status in NOT_JUDGED else "error" if is_error(e.status)
                    else "keep" if improved else "discard")
        self.marks[row.mark] += 1
        self.best_speedup = max(self.best_speedup, e.best_speedup)
        self.evaluated.append(row)
        self.trajectory.append(max(self.best_speedup, 0.0))
        return row

    def _on_CandidateRestored(self, e: ev.CandidateRestored) -> Candidate:
        """A resumed job's stored candidate: its row, mark and trajectory point as when it was
        judged; it moves from the resumed count to the rows (the tally stays the same)."""
        row = self._on_CandidateEvaluated(e)
        self.resumed = Tally(max(self.resumed.candidates - 1, 0),
                             max(self.resumed.not_judged - (row.mark == "not_judged"), 0))
        return row

    def _on_BestImproved(self, e: ev.BestImproved) -> None:
        self.best, self.best_speedup = e.program, e.speedup

    def _on_IterationFinished(self, e: ev.IterationFinished) -> None:
        self.best_speedup = max(self.best_speedup, e.best_speedup)
        if e.judged == 0:  # nothing in it: the header names the last iteration that judged
            self.iteration = max((c.iteration for c in self.candidates.values()
                                  if c.iteration < e.iteration), default=-1)

    def _on_BackendSwitched(self, e: ev.BackendSwitched) -> None:
        self.backend = e.backend

    def _on_RunFinished(self, e: ev.RunFinished) -> list[Candidate]:
        self.finished = e
        self.spend = e.spend or self.spend
        # A run that failed before it started was refused its input (a key, the task), or
        # stopped because its models kept failing (a revoked key, a dead server): the same
        # "error" as a bad config, and kernel-code exits 2 for it.
        failed = ("error" if (self.started is None and e.candidates == 0)
                  or e.stopped_by == "models" else "failed")
        self.phase = {"completed": "finished", "failed": failed}.get(e.reason, e.reason)
        self.error = e.error or ""
        unjudged = [row for row in self.candidates.values() if row.status is None]
        for row in unjudged:
            row.phase = "abandoned"  # the run ended before it was judged
        return unjudged

    def _on_RunCouldNotStart(self, e: RunCouldNotStart) -> None:
        self.phase, self.error = "error", e.message

    def _on_RunCrashed(self, e: RunCrashed) -> None:
        self.phase, self.error = "failed", e.message

    # -- helpers -------------------------------------------------------------------------------
    def _row(self, label: str, program: Program | None = None) -> Candidate:
        """The row for ``label``, created when an event arrives without its CandidateStarted."""
        row = self.candidates.get(label)
        if row is None:
            it = program.iteration_found if program else 0
            branch = int(program.metadata.get("branch", 0)) if program else 0
            row = self.candidates[label] = Candidate(label, it, branch)
        return row

    @property
    def tally(self) -> Tally:
        """The job's candidates, judged and not: those stored before this run and this run's
        (as the engine counts them, ``openkernel.wording.Tally``)."""
        return Tally(self.resumed.candidates + len(self.evaluated),
                     self.resumed.not_judged + self.marks["not_judged"])

    @property
    def latest(self) -> Candidate | None:
        """The most recently judged candidate."""
        return self.evaluated[-1] if self.evaluated else None

    @property
    def active(self) -> bool:
        """True while the engine may still accept pause, backend and steering commands."""
        return self.phase in ("starting", "running")

    @property
    def uses_llm(self) -> bool:
        return bool(self.started and self.started.generator == "llm")

    @property
    def on_cpu(self) -> bool:
        return bool(self.started and self.started.hardware.lower().startswith("cpu"))

    def streaming(self) -> list[Candidate]:
        """Candidates whose answer is streaming or waiting to be judged, oldest first (none once
        the run is over: a candidate the engine gave up on has no verdict to wait for)."""
        if self.finished is not None or self.phase in ("failed", "error"):
            return []
        return [c for c in self.candidates.values() if c.streaming]

    def programs(self) -> list[Program]:
        """Judged programs in the order they were judged."""
        return [c.program for c in self.evaluated if c.program is not None]
