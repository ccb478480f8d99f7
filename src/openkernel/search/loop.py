"""The search loop: iterations x branches of generate -> evaluate -> store, as one event stream.

Threads do the slow parts (a generator call, a candidate's evaluation in its worker process);
this generator is the only place that writes the database and the archive, so every write
happens in one thread, in order, and is committed as soon as a candidate is judged.

Before each iteration the parents are sampled (a branch whose last candidate failed, while
nothing is correct, gets that failure as its parent) and the critic diagnoses the best kernel
and each of them; the diagnoses join that iteration's prompts, with each branch's own recent
failures. Every answered model call is counted and stored (``spending``); once a budget is
reached (or the next call could pass it) no new candidate starts, those already generated are
judged, and the run ends "stopped" with the reason. Once every model has failed too many calls
in a row the run ends "failed", saying why. With ``traces.enabled`` each judged candidate is
also written to the trace dataset (``job_traces``). Kernels submitted from outside the
generator (``RunControl.submit``, ``search.external``) are taken between candidates and judged
and stored the same way, as ``u<N>``.

This page says how a search goes (``Search._run`` and ``_iterations``); its parts live beside
it, each a part of ``Search`` holding the same state: ``planning`` (the starting programs, each
branch's parent, the critic's diagnoses, the controls), ``scheduling`` (the candidates' threads
and their queue, pause), ``judging`` (one candidate: generated, judged in a worker) and
``recording`` (the archive, the database, the traces, a resumed job restored).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Iterator

from openkernel.config import Config
from openkernel.evaluation.host.executor import Aborted, Evaluator
from openkernel.evaluation.host.memplan import describe as describe_plan
from openkernel.events import (
    Event,
    IterationFinished,
    IterationStarted,
    LogEmitted,
    RunFinished,
    RunStarted,
)
from openkernel.generators import make_generator
from openkernel.generators.base import Generator
from openkernel.generators.offline import skill_matches
from openkernel.records import Diagnosis
from openkernel.roofline import peak_tflops_for
from openkernel.schemas import EvalResult, Program, Status
from openkernel.search.archive import Archive
from openkernel.search.control import RunControl
from openkernel.search.external import Submission
from openkernel.search.history import stalled
from openkernel.search.judging import Judging
from openkernel.search.llm_critic import LLMCritic, RulesCritic
from openkernel.search.planning import Planning
from openkernel.search.recording import Recording
from openkernel.search.scheduling import Scheduling
from openkernel.search.spending import Spending
from openkernel.store import Store
from openkernel.targets import TargetPlan
from openkernel.task import Task
from openkernel.wording import Tally


def _peak_gflops(hw, probe) -> float | None:
    dtype = probe.output_dtypes[0] if probe.output_dtypes else "float32"
    peak = peak_tflops_for(hw, dtype)
    return peak * 1e3 if peak else None


def _missing_archs_warning(targets: TargetPlan) -> str:
    missing = ", ".join(targets.missing)
    also = f" (and also timed on {', '.join(targets.others)})" if targets.others else ""
    return (f"gpu_arch: no {missing} GPU on this machine; candidates are judged on "
            f"{targets.primary}{also}. CUDA C++ is still compiled for {missing}, never run there.")


def _make_evaluator(task: Task, config: Config, store: Store):
    """The local pipeline, or with ``executor: ray`` the GPU actors of a Ray cluster (the
    same methods; Ray is imported only then)."""
    if config.executor == "ray":
        from openkernel.evaluation.host.ray_executor import RayEvaluator

        return RayEvaluator(task, config, store)
    return Evaluator(task, config, store)


LATE_MARGIN_S = 10.0  # of a job's deadline kept for ending its workers and storing the record


class Search(Planning, Scheduling, Judging, Recording):
    """One job: owns the store handle, the evaluator, the generator and the archive."""

    def __init__(self, task: Task, config: Config, control: RunControl | None = None,
                 store: Store | None = None, generator: Generator | None = None):
        self.task = task
        self.config = config
        self.control = control or RunControl()
        self.task_name = config.task_name or task.name
        self.job_name = config.job_name or datetime.now().strftime("run-%Y%m%d-%H%M%S")
        self._own_store = store is None  # closed at the end (SQLite checkpoints its WAL then)
        self.store = store or Store(config.paths.kernels_db_path)
        try:
            self.evaluator = _make_evaluator(task, config, self.store)
        except BaseException:  # Ray asked for but not installed: one message, no open store
            if self._own_store:
                self.store.close()
            raise
        self.generator = generator or make_generator(config)
        self.archive = Archive(config.search.exploration_ratio)
        seed = config.search.seed if config.search.seed is not None else random.randrange(2**31)
        self.rng = random.Random(seed)
        self.backend = config.backend
        # time.monotonic() by which the job must end (a suite's problem wall): the late
        # baselines are timed within what is left of it, so a judged problem ends inside it
        self.deadline: float | None = None
        self.instructions: list[str] = []
        self.candidates = 0  # judged in this run
        self.outcomes: Counter = Counter()  # the job's candidates by status (for the critic)
        self.stored_candidates = 0  # already stored for the job when it started (a resume)
        self._retried: dict[str, str] = {}  # label -> id of a stored generation failure
        self.spending = Spending(config, self.store, self.task_name, self.job_name)
        self.traces = None  # JobTraces when traces.enabled
        self.rules_critic = RulesCritic()
        critic_cfg = config.critic_model
        complete = getattr(self.generator, "complete", None)
        if critic_cfg is not None and complete is None:  # the offline generator has no client
            from openkernel.generators.llm import LLMGenerator

            complete = LLMGenerator([critic_cfg]).complete
        self.critic = LLMCritic(critic_cfg, complete) if critic_cfg else self.rules_critic
        self._judged_in: dict[int, list[Program]] = {}  # iteration -> candidates judged
        # code digest -> (program id, result): an identical candidate is never built twice.
        self._judged: dict[str, tuple[str, EvalResult]] = {}
        self._judged_lock = threading.Lock()
        self._notes_seen = 0
        self._judged_params: set[tuple] = set()  # (template, params) judged in this job
        self._exhausted = ""  # why the generator has nothing new left to propose
        self._in_flight = 0  # candidates started and not parked by a pause (nor done)
        self._queued = 0  # of those, waiting for a worker: a pause parks them, they run nothing
        self._flight_lock = threading.Lock()
        # Candidates from outside the generator (search.external): the job's count so far, the
        # ones waiting for their verdict by label, every judged program by id (their parents).
        self._external = 0
        self._waiting: dict[str, Submission] = {}
        self._by_id: dict[str, Program] = {}
        self._iteration_now = 0  # the iteration an external candidate is filed under
        self._outage = ""  # why no model can be asked any more: the run stops, "failed"

    # ------------------------------------------------------------------------------------
    def run(self) -> Iterator[Event]:
        try:
            yield from self._run()
        except GeneratorExit:  # the consumer stopped listening (a UI quit): record it
            self._finish("stopped")
            raise
        except BaseException:  # Ctrl+C and the like: what is stored stays, the run says so
            self._finish("interrupted")
            raise
        finally:
            self.control.close("the run has ended", force=True)
            if getattr(self, "_heartbeat", None) is not None:
                self._heartbeat.stop()
            self.evaluator.close()
            if self._own_store:
                self.store.close()

    def _finish(self, status: str, error: str = "") -> int:
        """The run row's end (once), and the traces' session values; returns the trace files
        rewritten."""
        if getattr(self, "run_id", None) is not None and not getattr(self, "_finished", False):
            self._finished = True
            self.store.finish_run(self.run_id, status, error)
            return self._finish_traces(status)
        return 0


    def _failed_before_start(self, message: str) -> RunFinished:
        """The one event of a run that could not start (the front ends print its error once)."""
        self.control.close(f"the run could not start ({message})", force=True)
        return RunFinished("failed", None, -1.0, 0, self.store.location,
                           error=message)

    def _run(self) -> Iterator[Event]:
        began = datetime.now(timezone.utc)  # the run's time includes its probe (bench's table)
        # The model first: a missing key is said at once, not after the task's probe. (A
        # generator without a preflight has nothing to reach.)
        # A resumed job whose budget is spent sends no call at all, not even this one.
        preflight = getattr(self.generator, "preflight", None)
        spent = self.spending.spent()
        problem = preflight() if preflight and not spent else None
        if not problem and isinstance(self.critic, LLMCritic) and not spent:
            problem = self._critic_preflight()
        if problem:
            yield self._failed_before_start(problem)
            return
        probe = self.evaluator.probe()
        hw = probe.hardware or self.evaluator.hardware
        if not probe.ok:
            yield self._failed_before_start(probe.error)
            return
        # (no iterations: only the probe and the baselines, which any reference has)
        reason = self.config.max_iters and self.generator.supports(self.task, probe, self.backend)
        if reason:
            yield self._failed_before_start(reason)
            return
        for warning in probe.warnings:
            yield LogEmitted("warning", warning)
        if self.evaluator.where:  # the Ray executor: how many GPU actors, on which nodes
            yield LogEmitted("info", self.evaluator.where)
        self.probe, self.hardware = probe, hw
        # `b` is decided at the key: the generator says now whether it can write that backend.
        self.control.backend_check = lambda b: self.generator.supports(self.task, probe, b)
        targets = self.evaluator.targets
        self.gpu_arch = targets.primary  # results are filed (and start_from_best looks) here
        if targets.missing and self.evaluator.hardware.device == "cuda":
            yield LogEmitted("warning", _missing_archs_warning(targets))

        stored = self.store.job_kernels(self.task_name, self.job_name)
        # A branch whose generation failed (no kernel came back) is tried again on resume; its
        # new row replaces the failed one.
        failed = Status.GENERATION_FAILED.value
        self._retried = {r.label: r.id for r in stored if r.status == failed and not r.author}
        stored = [r for r in stored if r.status != failed or r.author]
        self.stored_candidates = sum(not r.is_program0 for r in stored)
        run = self.store.start_run(
            task_name=self.task_name, job_name=self.job_name, backend=self.backend,
            gpu_arch=self.gpu_arch, hardware=hw.label, generator=self.generator.name,
            models=self.generator.models,
            # the compute ceiling for this task's dtype, the same the roofline estimates use
            config={**self.config.model_dump(mode="json"), "hardware": asdict(hw),
                    "peak_gflops": _peak_gflops(hw, probe),
                    "footprint": asdict(probe.memory) if probe.memory else None,
                    "library_bound": probe.library_bound},
            task_path=str(self.task.folder or self.task.reference_path), started_at=began,
        )
        self.run_id = run.id
        self._heartbeat = self.store.heartbeat(run.id)
        yield RunStarted(
            run_id=run.id, task_name=self.task_name, job_name=self.job_name, backend=self.backend,
            hardware=hw.label, models=tuple(self.generator.models), generator=self.generator.name,
            db_path=self.store.location, max_iters=self.config.max_iters,
            branches_per_iteration=self.config.branches_per_iteration,
            resumed_candidates=self.stored_candidates, reference_code=self.task.reference_code,
            skills=tuple(skill_matches(probe, self.backend, self.task, hw.interpreter)),
            peak_bandwidth_gbs=hw.peak_bandwidth_gbs, peak_tflops=dict(hw.peak_tflops or {}),
            max_usd=self.config.budget.max_usd, max_tokens=self.config.budget.max_tokens,
            peak_gflops=_peak_gflops(hw, probe),
            resumed_tally=Tally.of(Counter(r.status for r in stored if not r.is_program0)),
        )
        if stored:
            n = self.stored_candidates
            yield LogEmitted("info", f"Resuming job {self.job_name}: {n} candidate"
                             f"{'' if n == 1 else 's'} stored; only the missing i<N>-b<M> run.")
        for warning in self.spending.warnings():
            yield LogEmitted("warning", warning)
        events: list[Event] = []
        self.spending.check(events.append)  # a resumed job may have spent its budget already
        yield from events
        if probe.memory is not None:
            yield LogEmitted("info", describe_plan(self.evaluator.plan))
        started = time.monotonic()
        yield from self._open_traces(hw)
        try:
            done = self._restore(stored)
            yield from self._restored
            if not stored:
                yield from self._seed_archive()
            yield from self._iterations(done)
            yield from self._drain_submissions()
            # the next run's spares start beside the late baselines (not with the Ray executor)
            candidates_done = getattr(self.evaluator, "candidates_done", None)
            if candidates_done is not None:
                candidates_done()
            yield from self._late_baselines()
        except Aborted:  # the evaluator was stopped (a suite's problem past its wall)
            self.control.stop()
        except Exception as err:  # a bug: keep what is stored, say why, re-raise for the trace
            self._finish("failed", repr(err))
            yield RunFinished("failed", self._best_id(), self.archive.best_speedup,
                              self.stored_candidates + self.candidates,
                              self.store.location, error=repr(err),
                              new_candidates=self.candidates, tally=Tally.of(self.outcomes))
            raise
        budget = self.spending.final_reason()  # with the true total, calls in flight included
        error = self._outage or budget
        reason = ("failed" if self._outage else
                  "stopped" if self.control.stopped or budget else "completed")
        written = self._finish(reason, error)
        if written:
            yield LogEmitted("info", f"Traces: {written} candidates in {self.traces.folder}")
        extra = yield from self._device_report(started)
        spend = self.spending.snapshot()
        yield RunFinished(reason, self._best_id(), self.archive.best_speedup,
                          self.stored_candidates + self.candidates,
                          self.store.location, error=error or None, extra=extra,
                          spend=spend if spend.calls or self.generator.name == "llm" else None,
                          new_candidates=self.candidates, tally=Tally.of(self.outcomes),
                          planned=self.config.max_iters * self.config.branches_per_iteration,
                          ended_early=self._exhausted,
                          stopped_by="models" if self._outage else "budget" if budget else "")


    # iterations --------------------------------------------------------------------------
    def _iterations(self, done: dict[int, set[int]]) -> Iterator[Event]:
        branches = self.config.branches_per_iteration
        last = None  # the last iteration this run judged
        for iteration in range(self.config.max_iters):
            missing = [b for b in range(branches) if b not in done.get(iteration, set())]
            if not missing:
                continue
            if self.control.stopped or self.spending.reason or self._outage:
                break
            self._iteration_now = iteration
            plan = self._plan(missing, iteration)
            diagnoses: list[Diagnosis] = []
            if iteration > 0:  # the critic reads the iteration before, for these parents
                diagnoses = yield from self._critique(iteration - 1, [p for _, p, _, _ in plan])
            yield from self._apply_controls(iteration)
            yield IterationStarted(iteration)
            yield from self._run_branches(iteration, plan, diagnoses)
            judged = len(self._judged_in.get(iteration, []))
            yield IterationFinished(iteration, self.archive.best_speedup,
                                    self.stored_candidates + self.candidates,
                                    Tally.of(self.outcomes), judged)
            if judged:  # an iteration whose branches were all withdrawn has nothing to read
                last = iteration
            if self._outage:
                break
            if self._exhausted:  # the offline generator has nothing untried left
                ended = last if last is not None else iteration - 1  # a resumed job's last
                yield LogEmitted("info", f"The search ends after iteration {ended}: "
                                 f"{self._exhausted}" + ("." if judged else
                                 f" (iteration {iteration} had nothing new to judge)."))
                break
        said = stalled(self._judged_in, self.archive.best, last if last is not None else -1,
                       self._exhausted)
        if said:  # the search stopped improving: what became of the candidates since
            yield LogEmitted("info", said)
        if last is not None:  # what to try next, for the user (no model call once stopping)
            yield from self._critique(last, [], cheap=self.control.stopped or bool(self._outage))


    def _late_baselines(self) -> Iterator[Event]:
        """Max-autotune and reduce-overhead, asked for, are timed once the candidates are
        judged: max-autotune holds the GPU while it benchmarks its choices, so before them it
        would hold back every verdict (baselines.py)."""
        pending = getattr(self.evaluator, "late_baselines_pending", None)
        kinds = pending() if pending is not None and not self.control.stopped else []
        if not kinds:
            return
        names = {"autotune": "max-autotune", "cudagraphs": "reduce-overhead"}
        left = None if self.deadline is None else \
            max(0.0, self.deadline - time.monotonic() - LATE_MARGIN_S)
        yield LogEmitted("info", "Timing the reference under "
                         + " and ".join(names.get(k, k) for k in kinds)
                         + " now that the candidates are judged"
                         + ("." if left is None else f", within the {left:.0f} s left."))
        self.evaluator.baselines(within_s=left)


