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
"""

from __future__ import annotations

import hashlib
import queue
import random
import re
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from openkernel.config import Config
from openkernel.evaluation.host.devices import NoDeviceLeft
from openkernel.evaluation.host.executor import Aborted, Evaluator
from openkernel.evaluation.host.memplan import describe as describe_plan
from openkernel.events import (
    BackendSwitched,
    BestImproved,
    CandidateEvaluated,
    CandidateRestored,
    CandidateGenerated,
    CandidatePhaseChanged,
    CandidateStarted,
    CandidateWithdrawn,
    CriticDiagnosed,
    Event,
    InstructionAdded,
    IterationFinished,
    IterationStarted,
    LogEmitted,
    ModelCalled,
    RunFinished,
    RunPaused,
    RunResumed,
    RunStarted,
)
from openkernel.generators import make_generator
from openkernel.generators.base import Generator, Proposal, ProposalRequest, param_key, precision_of
from openkernel.generators.offline import skill_matches
from openkernel.records import Diagnosis
from openkernel.roofline import peak_tflops_for, roofline_estimate
from openkernel.schemas import EvalResult, Program, Status, new_program_id
from openkernel.search.archive import Archive
from openkernel.search.control import RunControl
from openkernel.search.external import LABEL_PREFIX, Submission, origin_of
from openkernel.search.history import FAILURES_SHOWN, branch_failures, reference_timing
from openkernel.search.llm_critic import LLMCritic, RulesCritic
from openkernel.search.spending import AnswerStream, Spending, call_summary
from openkernel.search.records import kernel_fields, program_from_row
from openkernel.store import Store
from openkernel.targets import TargetPlan
from openkernel.task import Task
from openkernel.templating import is_template
from openkernel.wording import Tally

_DONE = object()


class _Turns:
    """One iteration's branches generating one after another, in branch order (a generator
    with ``ordered``, the offline one): each waits for the branch before it to have proposed,
    or to have ended without proposing."""

    def __init__(self, count: int) -> None:
        self._done = [threading.Event() for _ in range(count)]

    def wait(self, position: int) -> None:
        if position > 0:
            self._done[position - 1].wait()

    def done(self, position: int) -> None:
        self._done[position].set()


# The worker's phases (evaluation.protocol.PHASES, and "profile") as a candidate's phase.
_WORKER_PHASES = {"setup": "building", "build": "building", "warmup": "building",
                  "queued": "waiting_for_gpu", "test": "testing", "benchmark": "timing",
                  "profile": "profiling", "sweep": "sweeping"}


def _digest(code: str, backend: str) -> str:
    return hashlib.sha256(f"{backend}\0{code}".encode()).hexdigest()


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


class Search:
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

    def _critic_preflight(self) -> str | None:
        """A critic model of its own (not one of the ensemble) is checked as they are: its key
        set and its service answering, before the first candidate."""
        cfg = self.critic.cfg
        models = getattr(self.generator, "_models", [])
        if any((m.model, m.api_base, m.api_key_env) == (cfg.model, cfg.api_base, cfg.api_key_env)
               for m in models):
            return None  # the generator's preflight checked it
        from openkernel.generators.llm import LLMGenerator

        problem = LLMGenerator([cfg]).preflight()
        return f"critic.model: {problem}" if problem else None

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

    # traces (opt-in) ----------------------------------------------------------------------
    def _open_traces(self, hw) -> Iterator[Event]:
        if not self.config.traces.enabled:
            return
        from openkernel.search.job_traces import JobTraces
        from openkernel.store.traces import Session

        session = Session(session_id="", problem=self.task_name, job_name=self.job_name,
                          hardware=hw.label, gpu_arch=self.gpu_arch, backend=self.config.backend,
                          generator=self.generator.name, model=", ".join(self.generator.models))
        try:
            self.traces = JobTraces.open(self.config.traces.dir, self.store, self.run_id, session)
        except Exception as err:  # noqa: BLE001 - pyarrow missing or the folder not writable
            yield LogEmitted("warning", f"traces.enabled: traces are not written ({err})")
            return
        yield LogEmitted("info", f"Traces: writing Parquet to {self.traces.folder}")

    def _trace(self, fields: dict, became_best: bool) -> Iterator[Event]:
        if self.traces is None:
            return
        try:
            self.traces.add(fields, became_best, self.archive, self.spending.snapshot())
        except OSError as err:  # a full disk must not end the search: the database has all
            self.traces = None
            yield LogEmitted("warning", f"traces: writing failed ({err}); no more traces "
                             "this run (the database keeps every candidate)")

    def _finish_traces(self, status: str) -> int:
        if self.traces is None:
            return 0
        try:
            return self.traces.finish(status, self.archive, self.spending.snapshot())
        except OSError:
            return 0

    def _device_report(self, started: float) -> Iterator[Event]:
        """How busy each GPU was: its timed turns (tests, trials, profiles) over the run."""
        wall = time.monotonic() - started
        busy = self.evaluator.gpu_busy(since=started)
        report = {}
        for slot, b in busy.items():
            first = (b["intervals"][0][0] - started) if b["intervals"] else None
            report[slot] = {"busy_s": b["busy_s"], "turns": b["turns"],
                            "first_turn_s": round(first, 3) if first is not None else None}
            if b["turns"] and wall > 0:
                after = wall - first
                yield LogEmitted("info", f"GPU {slot}: busy {b['busy_s'] / wall:.0%} of the "
                                 f"{wall:.0f} s run, {b['busy_s'] / after:.0%} after its first "
                                 f"candidate built ({b['turns']} timed turns)")
        extra = {"wall_s": round(wall, 3), "gpu_busy": report} if report else {"wall_s": round(wall, 3)}
        if self.evaluator.pch:
            extra["pch"] = self.evaluator.pch
        return extra

    def _best_id(self) -> str | None:
        return self.archive.best.id if self.archive.best else None

    # starting points ---------------------------------------------------------------------
    def _restore(self, rows) -> dict[int, set[int]]:
        """Rebuild the archive from a stored job; returns the branches done per iteration."""
        done: dict[int, set[int]] = {}
        self._restored: list[CandidateRestored] = []  # told to the views at the run's start
        for row in rows:
            program = program_from_row(row)
            self.archive.add(program)
            if not row.is_program0:
                self._restored.append(CandidateRestored(
                    program, program.status, row.label,
                    program.kernel_exec_result.runtime_improvement
                    if program.kernel_exec_result else -1.0, self.archive.best_speedup))
            self._by_id[program.id] = program
            self._iteration_now = max(self._iteration_now, row.iteration)
            if row.author:  # from outside the generator: no branch of an iteration
                self._external += 1
                self._judged_in.setdefault(row.iteration, []).append(program)
                self.outcomes[program.status] += 1
                self._remember(program)
                continue
            if not row.is_program0:
                self._judged_in.setdefault(row.iteration, []).append(program)
                self.outcomes[program.status] += 1
            if not row.is_program0 and row.code.strip():
                self._remember(program)
            self._note_judged(program)
            done.setdefault(row.iteration, set()).add(row.branch)
        return done

    def _seed_archive(self) -> Iterator[Event]:
        program0 = Program(
            id=new_program_id(), code=self.task.reference_code, is_program0=True,
            iteration_found=-1,
            metadata={"branch": 0, "label": "ref", "origin": "reference", "model": "",
                      "backend": "pytorch", "description": "the reference (program 0)"},
        )
        program0.add_eval_results(EvalResult(
            compiled=True, correctness=True, runtime_improvement=1.0, perf_score=3,
            eval_log="The reference implementation (program 0): speedup 1.0x by definition.",
        ))
        yield from self._record(program0)
        start = None
        if self.config.kernels_iter_0_path:
            path = Path(self.config.kernels_iter_0_path).expanduser()
            start = ("file", path.read_text(encoding="utf-8"), f"starting kernel {path}")
        elif self.config.start_from_best:
            row = self.store.best_kernel(self.task_name, self.gpu_arch)
            if row is None:
                yield LogEmitted("warning", f"start_from_best: no stored kernel for "
                                 f"{self.task_name} on {self.gpu_arch}; starting from the reference")
            else:
                start = ("best", row.code, f"best stored kernel {row.id} ({row.job_name})")
        if start:
            origin, code, what = start
            yield LogEmitted("info", f"Evaluating the {what}")
            result = self.evaluator.evaluate(code, self.backend, label="start")
            program = Program(
                id=new_program_id(), code=code, parent_id=program0.id, iteration_found=-1,
                metadata={"branch": 1, "label": "start", "origin": origin, "model": "",
                          "backend": self.backend, "description": what},
            )
            program.add_eval_results(result)
            self._remember(program)
            yield from self._record(program)

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
        if last is not None:  # what to try next, for the user (no model call once stopping)
            yield from self._critique(last, [], cheap=self.control.stopped or bool(self._outage))

    def _plan(self, branches: list[int], iteration: int) -> list[tuple]:
        """(branch, parent, inspirations, rng) for each branch to run. While the archive has
        nothing correct, a branch whose latest candidate failed builds on that failure (its
        log and code are the parent's), not on the reference again."""
        plan = []
        for branch in branches:
            parent = self.archive.sample_parent(self.rng)
            inspirations = self.archive.sample_inspirations(
                parent, self.config.search.num_inspirations, self.rng)
            if self.generator.name == "llm" and (
                    parent is None or parent.is_program0 or not parent.can_be_best):
                failed = branch_failures(self._judged_in, branch, iteration)
                parent = failed[0] if failed else parent
            plan.append((branch, parent, inspirations, random.Random(self.rng.random())))
        return plan

    def _critique(self, iteration: int, parents: list[Program],
                  cheap: bool = False) -> Iterator[Event]:
        """Diagnose the best kernel and each parent; store, announce and return the diagnoses."""
        events: list[Event] = []
        critic = self.rules_critic if cheap or self.spending.reason else self.critic
        if critic.model and not self.spending.begin(events.append):  # the budget allows none
            critic = self.rules_critic
        yield from events
        events = []
        if critic.model:  # a model call blocks the stream for a while: say what it waits for
            yield LogEmitted("info", f"Critic {critic.model} reads iteration {iteration}…")
        try:
            report = critic.judge(iteration, self.archive.best, parents,
                                  self._judged_in.get(iteration, []), self.probe, self.hardware,
                                  self.task_name, self.backend, outcomes=self.outcomes)
        finally:
            if critic.model:
                self.spending.end()
        for call in report.calls:
            event = self.spending.add(call, "", iteration)
            self.spending.store_call(self.run_id, event)
            events.append(event)
        self.spending.check(events.append)
        yield from events
        if report.warning:
            yield LogEmitted("warning", report.warning)
        for d in report.diagnoses:
            self.store.add_critique(
                run_id=self.run_id, task_name=self.task_name, job_name=self.job_name,
                iteration=iteration, text=d.said, source=d.source, kernel_id=d.kernel_id,
                label=d.label, role=d.role, bottleneck=d.bottleneck, headroom=d.headroom,
                model=d.model)
        if report.diagnoses:
            yield CriticDiagnosed(iteration, "\n".join(d.said for d in report.diagnoses),
                                  tuple(report.diagnoses))
        return report.diagnoses

    def _apply_controls(self, iteration: int) -> Iterator[Event]:
        backend = self.control.take_backend()
        if backend and backend != self.backend:
            reason = self.generator.supports(self.task, self.probe, backend)
            if reason:
                yield LogEmitted("warning", f"Backend stays {self.backend}: {reason}")
            else:
                self.backend = backend
                yield BackendSwitched(backend, iteration)
        for text in self.control.take_instructions():
            self.instructions.append(text)
            yield InstructionAdded(text, iteration)

    def _run_branches(self, iteration: int, plan: list[tuple],
                      diagnoses: list[Diagnosis]) -> Iterator[Event]:
        slots = threading.Semaphore(self.evaluator.max_workers)
        steering = "\n".join(self.instructions)
        instructions = "\n\n".join(
            s for s in (self.task.user_instructions.strip(), self.config.user_instructions.strip(),
                        steering) if s
        )
        best_said = [d for d in diagnoses if d.role == "best"]
        by_kernel = {d.kernel_id: d for d in diagnoses if d.role == "parent"}
        ref_ms, ref_how = reference_timing(self._judged_in, self.probe, self.hardware.label)
        jobs = []
        for branch, parent, inspirations, rng in plan:
            said = best_said + ([by_kernel[parent.id]] if parent and parent.id in by_kernel else [])
            failures = [p for p in branch_failures(self._judged_in, branch, iteration)
                        if parent is None or p.id != parent.id][:FAILURES_SHOWN]
            jobs.append(ProposalRequest(
                task=self.task, probe=self.probe, backend=self.backend, iteration=iteration,
                branch=branch, parent=parent, best=self.archive.best, inspirations=inspirations,
                user_instructions=instructions, hardware_label=self.hardware.label,
                rng=rng, diagnoses=tuple(said), judged=frozenset(self._judged_params),
                max_variants=self.config.prompt.max_template_combinations,
                allow_templated=self.config.prompt.allow_templated, failures=failures,
                reference_ms=ref_ms, reference_timing=ref_how,
            ))
        out: queue.Queue = queue.Queue()
        paused_seen = False
        settled = False  # paused, and said so once nothing was left in flight
        turns = _Turns(len(jobs)) if getattr(self.generator, "ordered", False) else None
        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="candidate") as pool:
            for position, request in enumerate(jobs):
                pool.submit(self._candidate, request, slots, out,
                            turn=(turns, position) if turns else None)
            pending = len(jobs)
            while pending:
                pending += self._start_external(slots, out)
                if self.control.paused != paused_seen:  # told at once, even while events flow
                    paused_seen, settled = self.control.paused, False
                    if not paused_seen:
                        yield RunResumed()
                    elif self._running():
                        yield RunPaused(self._running())
                try:
                    item = out.get(timeout=0.2)
                except queue.Empty:
                    # "paused" only once the queue is drained: the last candidate's verdict
                    # is stored (and told) before it
                    if paused_seen and not settled and self._running() == 0:
                        settled = True
                        yield RunPaused(0)
                    continue
                if item is _DONE:
                    pending -= 1
                else:
                    yield from self._take(item)
        if paused_seen and not self.control.paused:
            yield RunResumed()

    def _candidate(self, request: ProposalRequest, slots, out: queue.Queue,
                   submission: Submission | None = None, label: str = "",
                   turn: tuple[_Turns, int] | None = None) -> None:
        """Worker thread: generate (or take a submitted kernel), then evaluate in a confined
        subprocess. Never writes the db. ``turn``: (the iteration's turns, this branch's
        position) when branches generate in order."""
        label = label or f"i{request.iteration}-b{request.branch}"
        why = "the run stopped before it was judged"  # told to a submitter if it is not judged
        asks_model = submission is None or bool(submission.instruction)
        counted = False
        try:
            if not self.control.wait_while_paused():
                return  # stopped: this candidate never starts
            if asks_model and (self.spending.reason or self._outage):
                why = self.spending.reason or self._outage  # no model call starts
                return
            if asks_model and not self.spending.begin(out.put):
                why = self.spending.reason or "its model call could pass the budget"
                return  # its call could pass the budget: it never starts
            counted = self._flying(+1)
            model_hint = self.generator.models[0] if self.generator.models else self.generator.name
            if submission is not None and not submission.instruction:
                model_hint = submission.author
            out.put(CandidateStarted(label, request.iteration, request.branch,
                                     request.parent.id if request.parent else None, model_hint))
            program_id = new_program_id()
            t0 = time.perf_counter()
            if not asks_model:
                proposal = _submitted(submission, request.parent)
            else:
                out.put(CandidatePhaseChanged(label, "generating"))
                stream = request.on_text = AnswerStream(label, out.put)
                try:
                    if turn is not None:
                        turn[0].wait(turn[1])
                    proposal = self.generator.propose(request)
                finally:
                    self.spending.end()
                    if turn is not None:
                        turn[0].done(turn[1])
                stream.flush()
            gen_s = time.perf_counter() - t0
            for call in proposal.calls:
                out.put(self.spending.add(call, label, request.iteration, program_id))
            self.spending.check(out.put)
            self._check_models(out.put)
            if proposal.failed == "exhausted":  # nothing new to judge: no row, the job ends
                self._exhausted = proposal.log
                out.put(CandidateWithdrawn(label, proposal.log))
                return
            out.put(CandidateGenerated(label, proposal.model, proposal.description, proposal.reasoning))
            if proposal.code.strip():
                out.put(CandidatePhaseChanged(label, "queued"))  # for a worker, or a resume
            judged = self._judge_in_slot(proposal, request.backend, label, program_id, slots, out)
            if judged is None:
                return
            result, eval_s = judged
            parent = request.parent
            program = Program(
                id=program_id, code=proposal.code, raw_llm_code=proposal.answer,
                parent_id=parent.id if parent else None,
                generation=(parent.generation + 1) if parent else 1,
                iteration_found=request.iteration,
                metadata={
                    "branch": request.branch, "label": label, "origin": proposal.origin,
                    "model": proposal.model, "backend": request.backend,
                    "description": proposal.description, "params": proposal.params,
                    "prompt": proposal.prompt, "generation_log": proposal.log,
                    "inspiration_ids": [p.id for p in request.inspirations],
                    "user_instructions": request.user_instructions,
                    "tokens_used": proposal.tokens_used, "generation_s": gen_s,
                    "evaluation_s": eval_s, "llm": call_summary(proposal.calls),
                    "critic": [asdict(d) for d in request.diagnoses],
                },
            )
            if submission is not None:
                program.metadata["author"] = submission.author
                if submission.instruction:
                    program.metadata["description"] = (f"{submission.author} asked "
                                                       f"{proposal.model}: {submission.instruction}")
            program.add_eval_results(result)
            _mark_template(program, result, proposal)
            program.metadata["precision"] = precision_of(proposal, program.metadata["params"])
            submission = None  # judged: the loop stores it and answers the submitter
            out.put(program)
        except NoDeviceLeft as err:  # no GPU can judge anything any more: end the run
            why = str(err)
            out.put(LogEmitted("error", f"{label}: {err}"))
            out.put(CandidatePhaseChanged(label, "abandoned"))
            self.control.stop()
        except Aborted as err:  # stopped from outside while in flight: no verdict, nobody's fault
            out.put(LogEmitted("warning", f"{label}: stopped before its verdict ({err})"))
            out.put(CandidatePhaseChanged(label, "abandoned"))
        except Exception as err:  # a generator or evaluator bug: say so, keep the run going
            why = f"internal error: {err!r}"
            out.put(LogEmitted("error", f"{label}: internal error: {err!r}"))
            out.put(CandidatePhaseChanged(label, "abandoned"))
        finally:
            if turn is not None:  # ended before proposing (stopped, budget): the next goes on
                turn[0].done(turn[1])
            if counted:
                self._flying(-1)
            if submission is not None:
                self._waiting.pop(label, None)
                submission.refuse(why)
            out.put(_DONE)

    def _flying(self, step: int) -> bool:
        with self._flight_lock:
            self._in_flight += step
        return True

    def _running(self) -> int:
        """Candidates in flight that a pause lets finish: not those waiting for a worker, which
        it parks (said so: their rows read "paused")."""
        with self._flight_lock:
            return max(self._in_flight - self._queued, 0)

    def _take(self, item) -> Iterator[Event]:
        """One item from the candidates' threads: a judged program is recorded, an event passed
        on (a model call stored first)."""
        if isinstance(item, Program):
            yield from self._record(item)
            return
        if isinstance(item, ModelCalled):
            self.spending.store_call(self.run_id, item)
        yield item

    def _start_external(self, slots, out: queue.Queue) -> int:
        """Start judging the kernels submitted since the last look (``RunControl.submit``),
        each in a thread of its own like a branch's; returns how many started."""
        started = 0
        for sub in self.control.take_submissions():
            parent = self._by_id.get(sub.parent_id) if sub.parent_id else None
            if sub.parent_id and parent is None:
                sub.refuse(f"no kernel {sub.parent_id} in job {self.job_name}")
                continue
            if sub.instruction and self.generator.name != "llm":
                sub.refuse("revising a kernel needs a model: set inference in the config")
                continue
            self._external += 1
            label = f"{LABEL_PREFIX}{self._external}"
            self._waiting[label] = sub
            asked = f"Revise the parent kernel as the user asks: {sub.instruction}"
            request = ProposalRequest(
                task=self.task, probe=self.probe, backend=sub.backend or self.backend,
                iteration=self._iteration_now, branch=self._external, parent=parent,
                best=self.archive.best, hardware_label=self.hardware.label,
                user_instructions="\n\n".join(s for s in (
                    self.task.user_instructions.strip(), self.config.user_instructions.strip(),
                    *self.instructions, asked if sub.instruction else "") if s),
                rng=random.Random(self.rng.random()),
                max_variants=self.config.prompt.max_template_combinations,
                allow_templated=self.config.prompt.allow_templated)
            threading.Thread(target=self._candidate, name=f"candidate-{label}", daemon=True,
                             args=(request, slots, out, sub, label)).start()
            started += 1
        return started

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

    def _drain_submissions(self) -> Iterator[Event]:
        """Judge what was submitted while the iterations ended (or, in a run that only judges
        submissions, all of it); once none is left, later submissions are refused."""
        slots = threading.Semaphore(self.evaluator.max_workers)
        out: queue.Queue = queue.Queue()
        pending = 0
        while True:
            pending += self._start_external(slots, out)
            if not pending and self.control.close("the run has ended"):
                return
            try:
                item = out.get(timeout=0.2)
            except queue.Empty:
                continue
            if item is _DONE:
                pending -= 1
            else:
                yield from self._take(item)

    def _judge_in_slot(self, proposal: Proposal, backend: str, label: str, program_id: str,
                       slots, out: queue.Queue) -> tuple[EvalResult, float] | None:
        """Wait for a worker, then judge the proposal's code (an identical code's verdict is
        reused, an empty one is a generation failure); the result and the seconds it took, or
        None when the run stopped meanwhile."""
        phase = [""]

        def on_phase(worker_phase: str) -> None:
            mapped = _WORKER_PHASES.get(worker_phase)
            if mapped and mapped != phase[0]:
                phase[0] = mapped
                out.put(CandidatePhaseChanged(label, mapped))

        while True:
            with self._flight_lock:  # waiting for a worker: what a pause parks
                self._queued += 1
            try:
                slots.acquire()
            finally:
                with self._flight_lock:
                    self._queued -= 1
            if not self.control.paused:
                break
            # Parked by a pause, the worker given back (the others waiting park too): not in
            # flight while it waits, and its row says so.
            slots.release()
            self._flying(-1)
            out.put(CandidatePhaseChanged(label, "paused"))
            going = self.control.wait_while_paused()
            self._flying(+1)
            if not going:
                return None
            out.put(CandidatePhaseChanged(label, "queued"))
        try:
            return self._judge_held(proposal, backend, label, program_id, on_phase)
        finally:
            slots.release()

    def _judge_held(self, proposal: Proposal, backend: str, label: str, program_id: str,
                    on_phase) -> tuple[EvalResult, float]:
        """Judge the proposal with a worker slot held (see :meth:`_judge_in_slot`)."""
        t1 = time.perf_counter()
        key = _digest(proposal.code, backend)
        with self._judged_lock:
            seen = self._judged.get(key)
        if seen is not None:
            result = seen[1].model_copy(deep=True)
            result.metadata["duplicate_of"] = seen[0]
            result.eval_log = (f"Identical to kernel {seen[0]} (same code and backend): "
                               f"its evaluation is reused, nothing was rebuilt.\n"
                               + result.eval_log)
        elif proposal.compile_error:  # it does not parse: nothing to build
            result = EvalResult(compiled=False, perf_score=0,
                                metadata={"syntax_error": proposal.compile_error},
                                eval_log="The code did not compile (the parser refused "
                                "it), so nothing was built:\n" + proposal.compile_error)
        elif proposal.code.strip():
            result = self._judge_proposal(proposal, backend, label, on_phase)
            with self._judged_lock:  # before the slot is freed: a twin waiting sees it
                # a copy: the stored result loses its winner's code to the program
                self._judged.setdefault(key, (program_id, result.model_copy(deep=True)))
        else:  # nothing to build: a generation failure, not a build status
            why = ("The model's service gave no answer, so there was no kernel to build."
                   if proposal.failed == "service" else
                   "No kernel was extracted from the answer, so nothing was built.")
            result = EvalResult(compiled=False, perf_score=0,
                                metadata={"generation_failed": proposal.failed or "no_code"},
                                eval_log=(why + "\n" + (proposal.log or "")).strip())
        return result, time.perf_counter() - t1

    def _check_models(self, put) -> None:
        """Say which models were paused (an ensemble goes on), and stop once none is left."""
        for notice in getattr(self.generator, "take_notices", lambda: [])():
            put(LogEmitted("warning", notice))
        outage = getattr(self.generator, "outage", "")
        if outage and not self._outage:
            self._outage = outage
            put(LogEmitted("error", f"{outage}. The run stops: no new candidate starts, those "
                           "in flight finish; what failed is tried again when the job resumes."))

    def _judge_proposal(self, proposal, backend: str, label: str, on_phase) -> EvalResult:
        """Evaluate a proposal: a templated one (the offline generator's sweep, or a model's
        TEMPLATE_PARAMS with ``prompt.allow_templated``) at every combination, the winner's
        concrete code kept in ``template_results["winner_code"]``; any other as it is."""
        templated = proposal.variants or (self.config.prompt.allow_templated
                                          and is_template(proposal.code))
        if not templated:
            return self.evaluator.evaluate(proposal.code, backend, label=label, on_phase=on_phase,
                                           source_name=f"<{label}>")
        result, winner = self.evaluator.evaluate_template(proposal.code, backend, label,
                                                          variants=proposal.variants or None,
                                                          on_phase=on_phase)
        if winner is not None:
            result.template_results["winner_code"] = winner
        return result

    def _remember(self, program: Program) -> None:
        backend = program.metadata.get("backend", self.backend)
        result = program.kernel_exec_result
        seen = [(program.code, result)]
        template = result.template_results.get("template") if result is not None else None
        if template and result.template_results.get("winner"):
            # what was swept is remembered too: its twin is kept as the same winner
            twin = result.model_copy(deep=True)
            twin.template_results["winner_code"] = program.code
            seen.append((template, twin))
        with self._judged_lock:
            for code, judged in seen:
                self._judged.setdefault(_digest(code, backend), (program.id, judged))

    def _note_judged(self, program: Program) -> None:
        """Remember which template parameters this job has judged (the offline no-repeat rule)."""
        params = program.metadata.get("params") or {}
        name = params.get("template") if isinstance(params, dict) else None
        if not name:
            return
        combos = (program.kernel_exec_result.template_results.get("combinations", [])
                  if program.kernel_exec_result else [])
        for p in [params] + [c.get("params") or {} for c in combos]:
            self._judged_params.add(param_key(name, p))

    def _record(self, program: Program) -> Iterator[Event]:
        result = program.kernel_exec_result
        if result and result.correctness and not result.profiler_data and not program.is_program0:
            # No profiler ran: place the kernel on the roofline analytically, labelled estimate.
            result.profiler_data = roofline_estimate(result.runtime, self.probe, self.hardware)
        self._note_judged(program)
        previous = self.archive.best_speedup
        is_best = self.archive.add(program)
        # Timing stops once a candidate is decided against the reference and, past 1x, the best.
        self.evaluator.incumbent_speedup = max(self.archive.best_speedup, 0.0) \
            if self.archive.best_speedup > 1.0 else 0.0
        replaced = self._retried.pop(program.metadata.get("label"), None)
        if replaced is not None:
            self.store.delete_kernel(replaced)
            if self.traces is not None:
                self.traces.drop(replaced)
        fields = kernel_fields(
            program, run_id=self.run_id, task_name=self.task_name, job_name=self.job_name,
            hardware=self.hardware.label, gpu_arch=self.gpu_arch,
            reference_code=self.task.reference_code,
        )
        self.store.add_kernel(**fields)
        self._by_id[program.id] = program
        waiting = self._waiting.pop(fields["label"], None)
        if waiting is not None:  # stored: the person or agent who sent it gets its verdict
            waiting.outcome.set_result(program)
        if program.is_program0:
            return
        yield from self._trace(fields, is_best)
        self._judged_in.setdefault(program.iteration_found, []).append(program)
        while self._notes_seen < len(self.evaluator.notes):
            yield LogEmitted("warning", self.evaluator.notes[self._notes_seen])
            self._notes_seen += 1
        self.candidates += 1
        self.outcomes[program.status] += 1
        result = program.kernel_exec_result
        yield CandidateEvaluated(program, program.status, program.metadata["label"],
                                 result.runtime_improvement, self.archive.best_speedup)
        if is_best:
            yield BestImproved(program, previous, self.archive.best_speedup)


def _mark_template(program: Program, result: EvalResult, proposal) -> None:
    """A templated candidate is kept as its winner: the concrete code, its parameters (where
    the offline generator's next mutation starts), and the template itself in the metadata."""
    results = result.template_results
    if not results:
        return
    program.is_templated = True
    program.template_parameter_combinations = [c["params"] for c in results.get("combinations", [])]
    winner_code = results.pop("winner_code", None)
    if winner_code:
        program.code = winner_code
    results["template"] = proposal.code  # stored with the combinations: what was swept
    winner = results.get("winner")
    params = program.metadata.get("params") or {}
    if winner and params.get("template"):
        program.metadata["params"] = {"template": params["template"], **winner}
    proposed = {k: v for k, v in params.items() if k != "template"}
    if winner and proposed and winner != proposed:
        program.metadata["description"] = _kept_point(
            program.metadata.get("description") or "", proposed, winner,
            len(results.get("combinations", [])))


def _kept_point(description: str, proposed: dict, winner: dict, n: int) -> str:
    """The description of a sweep's proposed point, told of the winner that is kept (issue 58:
    "BLOCK=2048 ...; a sweep of 3" over stored code with BLOCK=4096): its knobs read the
    winner's values, and it says which point was proposed."""
    head, _, swept = description.partition("; a sweep of ")
    moved = {k: v for k, v in winner.items() if proposed.get(k) != v}
    told = []
    for k, v in moved.items():
        said = re.subn(rf"\b{re.escape(k)}={re.escape(str(proposed.get(k)))}\b", f"{k}={v}", head)
        if k == "num_warps":
            said = re.subn(rf"\b{proposed.get(k)} warps\b", f"{v} warps", said[0])
        head = said[0]
        if not said[1]:
            told.append(f"{k}={v}")
    was = ", ".join(f"{k}={proposed.get(k)}" for k in moved)
    return ((", ".join(told) + ": " if told else "") + head
            + f"; the winner of a sweep of {n}" + (f" ({swept.split(': ', 1)[-1]})" if swept else "")
            + f" over the proposed {was}")


def _submitted(submission: Submission, parent: Program | None) -> Proposal:
    """A kernel from a person or an agent, as the generator's answer would carry it."""
    what = submission.description or (f"{submission.author}'s edit of {parent.label}"
                                       if parent else f"{submission.author}'s kernel")
    return Proposal(code=submission.code, prompt="", answer="", model=submission.author,
                    origin=origin_of(submission.author), description=what)
