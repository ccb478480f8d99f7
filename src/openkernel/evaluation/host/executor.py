"""The engine's side of evaluation: one fresh, confined worker process per candidate.

:class:`Evaluator` is what the search loop calls. It never imports candidate code (nor touches
CUDA) itself: every job - hardware detection, the task probe, a candidate, the torch.compile
reference timing - runs in ``python -m openkernel.evaluation.worker`` with a scratch directory
as its cwd, an environment from ``environment.worker_env`` (no secrets), resource limits from
``environment.limits_preexec`` and its own process group, so a timeout kills it and everything it
started. The worker reports phases over a pipe; the build timeout covers start-up, import and
the first (compiling) call, the test timeout covers correctness and benchmark.

The pipeline on a GPU: up to ``max_workers`` workers run at once, placed on the least-loaded
GPU. They build (nvcc, Triton JIT) side by side on the CPU cores; each then waits for its GPU's
turn, and runs its tests and timed trials (or its profile) alone on that GPU, so timings never
overlap another candidate's while builds keep every core busy. Spare workers with torch
already imported (and, for profiles, already running under Nsight Compute) wait for the next
jobs on each GPU, and built CUDA extensions and Triton kernels are kept per candidate code
(``paths.build_cache_dir``), so an identical candidate, or the profiling run of one just
judged, never builds again. With the cuda backend, <torch/extension.h> is precompiled once
(``pch.py``).

Every wait has a bound. A worker's phases have limits (build, test; each reference baseline
its own wall, ``baselines.py``; a sweep its ``sweep_timeout_s``), past which its process group
is killed, and a killed worker is waited for 30 s at most. Waits on other jobs (a GPU slot, the
GPU's turn, a spare) end when those jobs end, each bounded the same way. :meth:`Evaluator.abort`
(a suite's problem past its wall) kills every running job at once; they end without a verdict.

Several targets (``gpu_arch: [sm_90, sm_80]``, see ``targets.py``): a candidate is judged on a
GPU of the primary architecture; once correct, it is timed again on one GPU of each other
configured architecture present, kept in ``metadata["by_arch"]``. CUDA C++ is built for every
target (a fat binary on a GPU, the nvcc check on the CPU).
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
import secrets
import shutil
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from openkernel.config import Config
from openkernel.evaluation.host import captures, ceilings, environment, launchers, ncu, zygote
from openkernel.evaluation.host.baselines import ReferenceBaselines, compile_ratio, wanted
from openkernel.evaluation.host.devices import DevicePool, NoDeviceLeft, is_device_fault
from openkernel.evaluation.host.float64 import Float64Answer
from openkernel.evaluation.host.memplan import (
    SPARES_PER_SLOT,
    describe,
    plan_memory,
    retry_plan,
    spares_beside_one,
)
from openkernel.evaluation.host.process import (
    WorkerProcess,
    WorkerRun,
    drive,
    read_full_log,
)
from openkernel.evaluation.host.profiling import Leaders, profile_candidate
from openkernel.roofline import roofline_estimate
from openkernel.evaluation.host.results import flag, from_worker
from openkernel.evaluation.host.spares import SPARES
from openkernel.evaluation.protocol import COMPARE_CACHE_VAR, Job, compare_cache
from openkernel.records import (
    CPU_LABEL,
    Hardware,
    MemoryPlan,
    TaskProbe,
    baseline_kind,
    hardware_from_json,
)
from openkernel.schemas import STATUS_LABELS, EvalResult, Status
from openkernel.targets import TargetPlan, plan_targets, same_arch
from openkernel.task import Task
from openkernel.wording import speedup_text

_HW_CACHE: dict[str, Hardware] = {}  # per engine process: the hardware does not change
_HW_LOCK = threading.Lock()


class Aborted(RuntimeError):
    """The evaluator was stopped (a problem past its wall): no verdict, nobody's fault."""


class Evaluator:
    """Builds, checks and times candidates for one task, each in its own worker process.

    Args:
        task: The task (reference + hooks).
        config: The run's configuration (``eval_config``, ``paths.scratch_dir``).
        store: Where the reference's baselines are kept (per task, hardware and software,
            ``baselines.py``) and found again; None keeps them in memory.
        bench_budget_s: Seconds of timed trials per candidate (default 2 on a GPU, 1 on the CPU).
        keep_scratch: Keep each candidate's scratch directory (for debugging).
    """

    where = ""  # who judges, told at the start of a run: nothing to tell for this machine

    def __init__(self, task: Task, config: Config, store=None, *, bench_budget_s: float | None = None,
                 keep_scratch: bool = False):
        self.task, self.config, self.store = task, config, store
        self.ec = config.eval_config
        self.bench_budget_s = bench_budget_s
        self.incumbent_speedup = 0.0  # the search's best speedup so far: timing stops sooner
        self.keep_scratch = keep_scratch or bool(os.environ.get("OPENKERNEL_KEEP_SCRATCH"))
        self.scratch_root = Path(config.paths.scratch_dir).expanduser().resolve()
        self._slot_lock = threading.Lock()
        self._probe: TaskProbe | None = None
        self._targets: TargetPlan | None = None
        self._slots: DevicePool | None = None
        self.build_cache_root = Path(config.paths.build_cache_dir).expanduser().resolve()
        # Triton's host-side modules, built once for the machine (launchers.py)
        self.launchers = launchers.machine(self.build_cache_root / "triton-host")
        # The shared spare pools this evaluator holds (spares.py): each key is what makes two
        # started workers interchangeable, (device, gpu index, profiler binary or None) first.
        self._spare_keys: set = set()
        self._spare_lock = threading.Lock()
        self._finalizer = weakref.finalize(self, SPARES.release, self._spare_keys,
                                           self.ec.keep_spares_s)
        # The precompiled torch header's folder, or why there is none (see pch.py)
        self.pch: dict = {}
        self.plan = MemoryPlan()  # made from the probe (memplan.py)
        self._reference = ReferenceBaselines(self)
        self.float64 = Float64Answer(self)  # the precision check's answer, made once (float64.py)
        self.leaders = Leaders()  # the fastest kernel judged: who is profiled (profiling.py)
        self.probe_s: float | None = None  # seconds the probe took (hardware detection included)
        self.notes: list[str] = []  # what the evaluator changed on its own during the run
        # Workers running a job now, so that abort() can end them; why it was called
        self._live: set[WorkerProcess] = set()
        self._live_lock = threading.Lock()
        self.aborted = ""

    # -- public API ---------------------------------------------------------------------
    @property
    def hardware(self) -> Hardware:
        """What candidates run on (detected once, in a worker process)."""
        key = os.environ.get("CUDA_VISIBLE_DEVICES", "*")
        with _HW_LOCK:
            if key not in _HW_CACHE:
                run = self._run(Job(mode="hardware", known_ceilings=ceilings.load_all()),
                                "cuda", None, label="hardware", spare=False)
                if (run.payload or {}).get("ceilings_measured"):
                    ceilings.save(run.payload["ceilings"])  # measured once per device model
                data = (run.payload or {}).get("hardware")
                _HW_CACHE[key] = hardware_from_json(data) if data else Hardware(
                    label=CPU_LABEL, device="cpu", gpu_arch="cpu", interpreter=True)
            return _HW_CACHE[key]

    @property
    def targets(self) -> TargetPlan:
        """The configured architectures split by the GPUs present (see ``targets.py``)."""
        if self._targets is None:
            hw = self.hardware
            self._targets = plan_targets(self.config.gpu_archs, _present_archs(hw), hw.gpu_arch)
        return self._targets

    @property
    def max_workers(self) -> int:
        """Workers at once: on a GPU half the cores (builds), at most 8 per GPU; 2 on the CPU."""
        if self.ec.max_workers:
            return self.ec.max_workers
        hw = self.hardware
        if hw.device != "cuda":
            return 2
        gpus = max(1, hw.num_gpus)
        return max(gpus, min((os.cpu_count() or 2) // 2, 8 * gpus))

    def gpu_busy(self, since: float | None = None) -> dict[int, dict]:
        """Per GPU slot: seconds its timed turns were held, and how many (empty on the CPU)."""
        return self._slots.busy(since) if self._slots is not None else {}

    def probe(self) -> TaskProbe:
        """Load the task in a worker, run the reference once and describe it (cached)."""
        if self._probe is not None:
            return self._probe
        t0 = time.monotonic()
        speculative = self._start_probe_worker()
        hw = self.hardware
        if speculative is not None and hw.device != "cuda":  # no GPU after all: not needed
            self._spare_keys.discard(speculative)
            SPARES.release({speculative}, 0)
        self._warm_spares()  # they import torch while the probe runs the reference
        pch = None
        if hw.device == "cuda" and self.config.backend == "cuda" and self.ec.precompile_torch_header:
            pch = threading.Thread(target=self._precompile_header, daemon=True, name="pch")
            pch.start()
        if hw.device == "cuda":
            self._launchers_wanted()  # Triton's driver utilities (and known launchers), once
        run = self._run(self._task_job(hw.device, "probe", inductor=captures.stored(self, hw)),
                        hw.device, 0 if hw.device == "cuda" else None, label="probe")
        if pch is not None:  # once per machine and torch: the first candidates' builds use it
            pch.join(self.ec.build_timeout_s + self.ec.test_timeout_s + 60)  # its worker's limits
        data = (run.payload or {}).get("probe")
        if data:
            probe = TaskProbe.from_json(data, hardware=hw)
            captures.keep(self, hw, run.payload.get("captured"))
        else:
            what = f"timed out after {self.ec.build_timeout_s:g} s" if run.timed_out else (
                (run.payload or {}).get("fatal") or "the worker died")
            probe = TaskProbe(ok=False, hardware=hw, error=(
                f"{self.task.reference_path}: probing the task failed: {what}\n{run.log_tail}"))
        if self.pch.get("why"):
            probe.warnings.append(f"CUDA C++ builds parse <torch/extension.h> each time: "
                                  f"no precompiled header ({self.pch['why']})")
        self._probe = probe
        self.probe_s = round(time.monotonic() - t0, 2)
        if probe.ok:
            self.plan = plan_memory(probe.memory, hw, memory_fraction=self.ec.gpu_memory_fraction,
                                    max_workers_per_gpu=self._per_device(), flops=probe.flops)
            if hw.device == "cuda":
                pool = self._acquire_pool()
                pool.per_device = min(pool.per_device, self.plan.workers_per_gpu)
                pool.check_slots = self.plan.checks_per_gpu if self.ec.overlap_checks else 1
                # checks one at a time: one waiting for the answer would hold its making's turn
                self.plan.answer_on_device &= self.ec.overlap_checks
            self.float64.start(probe)
        if probe.ok and wanted(self.ec, hw):
            # Every candidate's improve_over_compile needs them: from the store, or timed now,
            # compiled beside the first candidates' builds.
            threading.Thread(target=self._time_baselines, daemon=True,
                             name="reference-baselines").start()
        return probe

    def evaluate(self, code: str, backend: str, label: str = "", *,
                 on_phase: Callable[[str], None] | None = None,
                 source_name: str | None = None, build_cache: Path | None = None) -> EvalResult:
        """Build, check and time one candidate; never raises for candidate faults.

        ``on_phase`` hears each phase the worker enters (``protocol.PHASES``, then "profile");
        ``source_name`` replaces the scratch copy's path in the log (the user's file, say);
        ``build_cache``: the folder to build in instead of the code's own (a sweep's winner
        finds its kernels where the sweep compiled them)."""
        hw, primary = self.hardware, self.targets.primary
        job = self._evaluate_job(backend)
        cache = build_cache if build_cache is not None else self.build_cache(code, backend)
        plan = self.plan
        run, slot, requeued = self._judge(replace(job, plan=plan.to_json()), code, label, cache,
                                          primary, on_phase)
        result = self._judged(run, hw)
        if result.get_status() is Status.EVALUATOR_FAULT:
            # The evaluator failed, not the candidate: judge it once more, with a smaller plan
            # and the GPU to itself.
            first = result.metadata["evaluator_fault"]
            self._after_fault(first)
            plan = retry_plan(plan, self._probe.memory if self._probe else None, hw,
                              self.ec.gpu_memory_fraction, self._probe.flops if self._probe else 0.0)
            run, slot, more = self._judge(replace(job, plan=plan.to_json()), code, label, cache,
                                          primary, on_phase, exclusive=hw.device == "cuda")
            requeued += more
            result = self._judged(run, hw)
            result.metadata["retried"] = {"first_fault": first, "plan_level": plan.level}
            result.eval_log = (f"First attempt: evaluator fault ({first['kind']} while "
                               f"{first['where']}); retried once with {describe(plan)}.\n"
                               + result.eval_log)
        result.metadata.update(label=label, backend=backend, evaluation_s=round(run.wall_s, 3),
                               phase_s=run.phase_seconds(), gpu_slot=slot,
                               prestarted=run.prestarted,
                               worker=(run.payload or {}).get("worker_timing"))
        if requeued:
            result.metadata["requeued"] = requeued
        return self._finish(result, job, code, label, cache, on_phase, source_name)

    def adopt(self, sweep: WorkerRun, payload: dict, code: str, backend: str, label: str,
              cache: Path | None, on_phase: Callable[[str], None] | None = None,
              slot: int | None = None) -> EvalResult | None:
        """The verdict on a sweep's winner judged in full by the sweep's own worker
        (``payload``: what its evaluation returned there), finished as :meth:`evaluate`
        finishes one; None when the evaluator failed there (the caller then judges it in a
        worker of its own, as after any evaluator fault)."""
        if payload.get("fault"):
            return None
        hw = self.hardware
        run = copy.copy(sweep)
        run.payload = payload
        result = self._judged(run, hw)
        if result.get_status() is Status.EVALUATOR_FAULT:
            return None
        judge_s = float(payload.get("judge_s") or 0.0)
        result.metadata.update(label=label, backend=backend, evaluation_s=round(judge_s, 3),
                               phase_s={"test": round(judge_s, 3)}, judged_in="sweep",
                               gpu_slot=slot, prestarted=sweep.prestarted,
                               worker=(sweep.payload or {}).get("worker_timing"))
        job = replace(self._evaluate_job(backend), plan=self.plan.to_json())
        return self._finish(result, job, code, label, cache, on_phase, None)

    def _evaluate_job(self, backend: str) -> Job:
        """An evaluate job for a candidate of ``backend`` on the primary target."""
        hw = self.hardware
        return self._task_job(hw.device, "evaluate", backend=backend,
                              correctness_seeds=self.ec.correctness_seeds,
                              gpu_arch=self.targets.primary,
                              build_timeout_s=self.ec.build_timeout_s,
                              gpu_memory_fraction=self.ec.gpu_memory_fraction,
                              **self._bench_params(hw))

    def _finish(self, result: EvalResult, job: Job, code: str, label: str, cache: Path | None,
                on_phase: Callable[[str], None] | None, source_name: str | None) -> EvalResult:
        """What follows any verdict: a second judgement of one too good to be true, the other
        architectures' runs, the profile, the roofline estimate, and the log made safe to show."""
        hw = self.hardware
        if result.metadata.get("too_good"):
            result = self._judged_again(result, job, code, label, cache, on_phase)
        if hw.device == "cuda" and len(self.config.gpu_archs) > 1:
            self._judge_other_archs(job, code, label, cache, result)
        if hw.device == "cuda" and result.correctness and self.ec.profile:
            behind = self.leaders.behind(result.runtime)
            if behind is not None and self.ec.profile_scope == "leaders":
                result.eval_log += (f"\nNot profiled: {behind:.2f}x the time of the fastest "
                                    "kernel judged so far (eval_config.profile_scope: leaders).")
            else:
                if on_phase is not None:
                    on_phase("profile")
                try:
                    profile_candidate(self, code, result)
                except Aborted:  # the verdict stands; only its profile was cut short
                    result.eval_log += "\nNot profiled: the evaluation was stopped."
        if result.correctness and not result.profiler_data and self._probe is not None:
            # No profiler ran: the analytic estimate, labelled one, on every path (a search,
            # `openkernel eval`, bench) alike.
            result.profiler_data = roofline_estimate(result.runtime, self._probe, hw)
        # Defence in depth: workers never see secrets, but nothing printed may carry one out.
        result.eval_log = environment.redact(result.eval_log, environment.secret_values(os.environ))
        if source_name:  # tracebacks name the file the user knows, not its scratch copy
            scratch_copy = re.escape(str(self.scratch_root)) + r"/w-[0-9a-f]+/candidate\.py"
            result.eval_log = re.sub(scratch_copy, lambda _: source_name, result.eval_log)
        return result

    def _judged_again(self, first: EvalResult, job: Job, code: str, label: str,
                      cache: Path | None, on_phase: Callable[[str], None] | None) -> EvalResult:
        """A result too good to be true, judged once more in a worker of its own with fresh
        inputs (other correctness seeds, every timed call on its own set as always): a kernel
        that is so again is flagged (:func:`results.flag`); else the second verdict stands,
        saying why it was made."""
        why = first.metadata["too_good"]
        fresh = replace(job, plan=self.plan.to_json(), seed_base=secrets.randbelow(1 << 30) + 1)
        run, slot, requeued = self._judge(fresh, code, label, cache, self.targets.primary,
                                          on_phase)
        second = self._judged(run, self.hardware)
        for key in ("label", "backend", "evaluation_s", "phase_s", "gpu_slot", "prestarted",
                    "worker", "judged_in", "retried", "requeued"):
            if key in first.metadata:
                second.metadata[key] = first.metadata[key]
        if requeued:
            second.metadata.setdefault("requeued", []).extend(requeued)
        second.metadata["judged_again"] = {"why": why, "first_runtime_ms": first.runtime,
                                           "first_speedup": first.runtime_improvement,
                                           "evaluation_s": round(run.wall_s, 3)}
        second.eval_log = (f"Judged twice: the first judgement was too good to be true ({why}); "
                           "this is the second, on fresh inputs.\n" + second.eval_log)
        return flag(second, first) if second.metadata.get("too_good") else second

    def _judged(self, run: WorkerRun, hw: Hardware) -> EvalResult:
        """The verdict on one run (with the torch.compile ratio once it is correct)."""
        payload = run.payload or {}
        ratio = None
        if hw.device == "cuda" and payload.get("correctness") and not payload.get("integrity_violation"):
            ratio = compile_ratio(self.baselines(late=False))
        return self._result(run, hw, ratio, self._probe)

    def _after_fault(self, fault: dict) -> None:
        """Out of memory in the evaluator's own checks with several workers on a GPU: fewer
        workers hold task data at once from now on."""
        if fault.get("kind") == "out_of_memory" and self._slots is not None and \
                self._slots.per_device > 1:
            self._slots.per_device = max(1, self._slots.per_device // 2)
            self.plan = replace(self.plan, workers_per_gpu=self._slots.per_device)
            self.notes.append(f"an evaluator check ran out of device memory: now "
                              f"{self._slots.per_device} worker(s) per GPU")

    def evaluate_template(self, code: str, backend: str, label: str = "",
                          variants: list | None = None,
                          on_phase: Callable[[str], None] | None = None,
                          ) -> tuple[EvalResult, str | None]:
        """Judge a templated candidate (``openkernel.templating``): every combination (or the
        documented sample past ``prompt.max_template_combinations``) screened in one sweep, the
        fastest correct one judged in full. ``variants`` (the offline generator's) are used as
        given; otherwise they are instantiated from ``code``'s text. Returns the result and
        the winner's concrete code (None when no combination was correct or the template is bad).
        """
        from openkernel.evaluation.host.templates import judge_template
        from openkernel.templating import Space, TemplateError, parse
        from openkernel.templating import variants as instantiate_all

        bound = self.config.prompt.max_template_combinations
        try:
            if variants:
                space, sampled = parse(code) or Space(), False
                if not space.options:
                    space = Space({k: sorted({repr(v.params[k]) for v in variants})
                                   for k in variants[0].params}, dict(variants[0].params))
            else:
                space, variants, sampled = instantiate_all(code, bound)
        except TemplateError as err:
            return EvalResult(compiled=False, perf_score=0, eval_log=f"Bad template: {err}. "
                              "Nothing was built."), None
        return judge_template(self, space, variants, sampled, bound, backend, label, on_phase)

    def close(self) -> None:
        """Let go of the spare workers: the next evaluator of this process takes them within
        ``eval_config.keep_spares_s``, then they stop (each job's own worker ended with it)."""
        self._finalizer()

    def spares(self) -> dict[tuple[str, int | None, str | None], list[WorkerProcess]]:
        """The spares waiting in the pools this evaluator holds, by (device, gpu, profiler)."""
        return {key[:3]: SPARES.waiting(key) for key in list(self._spare_keys)}

    def abort(self, reason: str) -> None:
        """Stop now: end every worker running a job (and the spares). A job cut short this way,
        or started after it, raises :class:`Aborted` instead of returning a
        verdict, so no candidate is blamed for it and no baseline is stored from it."""
        with self._live_lock:
            self.aborted = reason or "stopped"
            live = list(self._live)
        for worker in live:
            worker.terminate()
        self.close()

    @property
    def costs(self) -> dict:
        """Seconds spent beside the candidates: the probe, the baselines (0 when found in the
        store) and their sum, ``fixed_s``; ``probe_steps_s`` splits the probe (``start``: the
        worker's start and imports, the rest ``TaskProbe.steps_s``)."""
        costs = {"probe_s": self.probe_s, **self._reference.costs}
        steps = self._probe.steps_s if self._probe is not None else {}
        if steps and self.probe_s:
            costs["probe_steps_s"] = {"start": round(max(self.probe_s - sum(steps.values()), 0.0), 2),
                                      **steps}
        costs["fixed_s"] = round((self.probe_s or 0.0) + (costs.get("baselines_s") or 0.0), 2)
        if self.float64.note:
            costs["float64_answer"] = self.float64.note
        return costs

    def build_cache(self, code: str, backend: str) -> Path | None:
        """The build-cache folder of this exact candidate (GPU only: nothing is built on the CPU)."""
        hw = self.hardware
        if hw.device != "cuda":
            return None
        # Every target is in the key: a fat binary for [sm_90, sm_80] is not one for sm_90.
        archs = ";".join(self.targets.compile) or self.targets.primary
        key = hashlib.sha256(f"{backend}\n{archs}\n{code}".encode())
        path = self.build_cache_root / key.hexdigest()[:24]
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- helpers --------------------------------------------------------------------------
    def _task_job(self, device: str, mode: str, **fields) -> Job:
        """A job of ``mode`` about this task (every job that may load a CUDA C++ candidate
        builds it for the same targets)."""
        t = self.task
        read_only = [str(t.folder or t.reference_path.parent)]
        pch_dir = self.pch.get("pch_dir")
        if pch_dir:
            read_only.append(pch_dir)
        answer = self.float64.path
        if answer is not None:
            read_only.append(str(self.float64.root))
        return Job(mode=mode, device=device, reference_path=str(t.reference_path),
                   hooks_path=str(t.hooks_path) if t.hooks_path else None, read_only=read_only,
                   cuda_targets=list(self.targets.compile), pch_dir=pch_dir,
                   allow_tf32=self.ec.allow_tf32,
                   float64_path=str(answer) if answer is not None else None,
                   float64_wait_s=self.float64.wait_s, **fields)

    def _precompile_header(self) -> None:
        """The precompiled <torch/extension.h> for CUDA C++ builds (see ``pch.py``)."""
        run = self._run(Job(mode="pch", device="cuda", pch_root=str(self.build_cache_root / "pch")),
                        "cuda", None, label="pch", spare=False)
        payload = run.payload or {}
        if "pch_dir" in payload:
            self.pch = payload
        else:
            why = payload.get("fatal") or (f"timed out in {run.phase}" if run.timed_out else "the worker died")
            self.pch = {"pch_dir": None, "why": why}

    def _launchers_wanted(self) -> None:
        """Start the machine's ``launchers`` job in the background when it has something to
        build (the first time in this process: Triton's driver utilities) and none runs."""
        machine = self.launchers
        todo = machine.pending()
        with machine.lock:
            if machine.building or machine.broken or (machine.started and not todo):
                return
            machine.building = True
        threading.Thread(target=self._build_launchers, daemon=True, name="launchers").start()

    def _build_launchers(self) -> None:
        machine = self.launchers
        try:
            while True:
                todo = machine.pending()
                if machine.started and not todo:
                    return
                run = self._run(Job(mode="launchers", device="cuda", launchers_dir=str(machine.folder),
                                    launchers=todo), "cuda", None, label="launchers", spare=False)
                machine.started = True
                payload = run.payload or {}
                if "built" not in payload:  # no driver utilities: each worker builds its own
                    machine.broken = payload.get("error") or "the launchers job failed"
                    return
                # a signature that failed is not tried again: its workers build their own
                machine.done(payload["built"] + [f.get("signature") for f in payload.get("failed", [])])
        except Exception:  # noqa: BLE001 - an aborted run, a failed spawn: workers build their own
            return
        finally:
            with machine.lock:
                machine.building = False

    def _judge(self, job: Job, code: str, label: str, cache: Path | None, arch: str,
               on_phase: Callable[[str], None] | None = None, exclusive: bool = False,
               ) -> tuple[WorkerRun, int | None, list[str]]:
        """Run an evaluate job on a GPU of ``arch`` (or the CPU); returns (run, slot, requeued)."""
        hw, requeued = self.hardware, []
        while True:
            slot = self._acquire(arch, exclusive=exclusive)
            try:
                run = self._run(job, hw.device, slot, label=label, code=code, build_cache=cache,
                                on_phase=on_phase)
            finally:
                self._release(slot)
            if slot is None or not is_device_fault(run.log_tail):
                return run, slot, requeued
            # The GPU failed, not the candidate: quarantine it and judge the candidate elsewhere.
            self._slots.quarantine(slot, run.log_tail.splitlines()[-1][:200] if run.log_tail else "")
            requeued.append(f"GPU slot {slot} failed as a device; re-queued on another GPU")
            # With no healthy GPU of this arch left, the next _acquire raises NoDeviceLeft.

    def _result(self, run: WorkerRun, hw: Hardware, ratio: float | None,
                probe: TaskProbe | None) -> EvalResult:
        return from_worker(run.payload, phase=run.phase, timed_out=run.timed_out,
                           returncode=run.returncode, log_tail=run.log_tail, hw=hw,
                           probe=probe, compile_ratio=ratio,
                           limits={"build_timeout_s": self.ec.build_timeout_s,
                                   "test_timeout_s": self.ec.test_timeout_s})

    def _judge_other_archs(self, job: Job, code: str, label: str, cache: Path | None,
                          result: EvalResult) -> None:
        """Judge a correct candidate again on one GPU of each other configured architecture.

        Each gets the whole check (a kernel correct on one architecture can be wrong on
        another), and its own line in the log; the verdict stays the primary one's.
        """
        primary = self.targets.primary
        by_arch = {primary: arch_entry(result, result.metadata.get("gpu_slot"))}
        result.metadata["by_arch"] = by_arch
        if not result.correctness:
            return
        lines = []
        for arch in self.targets.others:
            try:
                run, slot, requeued = self._judge(job, code, f"{label}@{arch}", cache, arch)
            except NoDeviceLeft as err:  # that architecture is gone; the primary verdict stands
                lines.append(f"On {arch}: not run ({err})")
                continue
            # No probe: the roofline flag uses the first GPU's peaks, not this one's.
            other = self._result(run, self.hardware, None, None)
            by_arch[arch] = arch_entry(other, slot)
            if requeued:
                result.metadata.setdefault("requeued", []).extend(requeued)
            lines.append(arch_line(arch, f"GPU slot {slot}", other))
        if lines:
            result.eval_log = "\n".join([result.eval_log.rstrip(), *lines]).strip()

    def _bench_params(self, hw: Hardware) -> dict:
        gpu = hw.device == "cuda"
        budget = self.bench_budget_s if self.bench_budget_s is not None else (2.0 if gpu else 1.0)
        return {"bench_budget_s": budget, "min_trials": 10 if gpu else 3,
                "max_trials": 2000 if gpu else 50, "adaptive_trials": self.ec.adaptive_trials,
                "incumbent_speedup": self.incumbent_speedup,
                "overlap_checks": self.ec.overlap_checks,
                "fused_comparison": self.ec.fused_comparison,
                "check_timed_calls": self.ec.check_timed_calls}

    def _acquire(self, arch: str | None = None, exclusive: bool = False) -> int | None:
        """A GPU slot of ``arch`` (default: the primary target's), None on the CPU."""
        hw = self.hardware
        if hw.device != "cuda":
            return None
        return self._acquire_pool().acquire(among=self._devices_of(arch or self.targets.primary),
                                            exclusive=exclusive)

    def _per_device(self) -> int:
        gpus = max(1, self.hardware.num_gpus)
        return max(1, -(-self.max_workers // gpus))

    def _acquire_pool(self) -> DevicePool:
        """The GPUs' pool, made on first use (its size needs the hardware record)."""
        with self._slot_lock:
            if self._slots is None:
                gpus = list(range(max(1, self.hardware.num_gpus)))
                self._slots = DevicePool(gpus, self._per_device())
            return self._slots

    def _devices_of(self, arch: str) -> list[int] | None:
        """The visible GPUs of ``arch``; None (any GPU) when the record names no GPU's arch."""
        return [i for i, gpu in enumerate(self.hardware.gpu_archs) if same_arch(arch, gpu)] or None

    def _release(self, slot: int | None) -> None:
        if slot is not None and self._slots is not None:
            self._slots.release(slot)

    def _run(self, job: Job, device: str, gpu_index: int | None, label: str = "",
             code: str | None = None, profiler: str | None = None, build_cache: Path | None = None,
             spare: bool = True, on_phase: Callable[[str], None] | None = None,
             variants: list[str] | None = None, scale: float = 1.0,
             walls: dict[str, float] | None = None, total_s: float | None = None) -> WorkerRun:
        """One job in a worker (a spare when one waits); timed phases take the GPU's turn.

        ``profiler``: the Nsight Compute binary to run the worker under (a profile job); such
        workers are spares of their own kind. ``variants``: the modules of a sweep job, one file
        each; ``scale`` multiplies both time limits (a sweep builds and checks several);
        ``walls``: phases with limits of their own; ``total_s``: a limit on the whole job
        (waiting for the turn not counted). Raises Aborted once :meth:`abort` was called.
        """
        if self.aborted:
            raise Aborted(self.aborted)
        worker = self._take(device, gpu_index, profiler) if spare else None
        prestarted = worker is not None
        if worker is None:
            worker = self._spawn(device, gpu_index, profiler)
        scratch = worker.scratch
        with self._live_lock:
            self._live.add(worker)
            aborted = self.aborted
        try:
            if aborted:  # abort() ran between the check above and now: it missed this worker
                worker.kill()
                raise Aborted(aborted)
            if code is not None:
                (scratch / "candidate.py").write_text(code, encoding="utf-8")
                job = replace(job, code_path=str(scratch / "candidate.py"))
            if variants:
                paths = [scratch / f"variant_{i}.py" for i in range(len(variants))]
                for path, text in zip(paths, variants):
                    path.write_text(text, encoding="utf-8")
                job = replace(job, variant_paths=[str(p) for p in paths])
            if build_cache is not None:
                job = replace(job, build_cache=str(build_cache))
                if device == "cuda":
                    job = replace(job, launchers_dir=str(self.launchers.folder))
            (scratch / "label").write_text(label, encoding="utf-8")
            job = replace(job, scratch=str(scratch))
            turn = (lambda: self._slots.turn(gpu_index)) if (
                gpu_index is not None and self._slots is not None) else None
            # a retry holds its GPU alone (the smaller plan): its checks take the turn too
            checks = (lambda: self._slots.checks(gpu_index)) if (
                turn is not None and job.overlap_checks and not job.plan.get("exclusive")) else None
            run = drive(worker, job, self.ec.build_timeout_s * scale, self.ec.test_timeout_s * scale,
                        turn=turn, release_on_result=profiler is not None, on_phase=on_phase,
                        checks=checks, walls=walls, total_s=total_s)
            if self.aborted:  # killed by abort(), not by its own doing
                raise Aborted(self.aborted)
            run.prestarted = prestarted
            if isinstance(run.payload, dict) and self.launchers.report(
                    run.payload.pop("launchers", None)):
                self._launchers_wanted()
            if worker.fork_error and isinstance(run.payload, dict):  # why it was started anew
                run.payload.setdefault("worker_timing", {})["fork_error"] = worker.fork_error
            if profiler is not None:
                run.full_log = read_full_log(worker)
            return run
        finally:
            with self._live_lock:
                self._live.discard(worker)
            if not self.keep_scratch:
                shutil.rmtree(scratch, ignore_errors=True)

    def _time_baselines(self) -> None:
        """The baselines thread (eager and compile: what the verdicts need; the late stage
        waits for the candidates, ``baselines.py``): an abort ends it with nothing stored."""
        try:
            self.baselines(late=False)
        except Aborted:
            pass

    def baselines(self, late: bool = True, within_s: float | None = None) -> dict | None:
        """The reference's baselines on this hardware (``baselines.py``: {"eager": stats,
        "compile": stats, "autotune": stats, "timed_out": {...}, ...} as asked for by
        ``eval_config.baselines``), from the store or timed once, each under its wall; None
        when none is asked for (the CPU by default) or the timing failed (``baseline_error``
        says why); ``late=False``: eager and compile only (what a verdict needs), the late
        stage not timed now; ``within_s``: the late stage's walls shortened to fit it (a
        problem's time left). Works after :meth:`close` too (with a worker of its own)."""
        return self._reference.get(self.hardware, late, within_s)

    def late_baselines_pending(self) -> list[str]:
        """The baselines still to be timed after the candidates (max-autotune, cudagraphs)."""
        return self._reference.pending(self.hardware)

    @property
    def baseline_error(self) -> str:
        return self._reference.error

    def _spawn(self, device: str, gpu_index: int | None, profiler: str | None = None) -> WorkerProcess:
        scratch = self.scratch_root / f"w-{uuid.uuid4().hex[:12]}"
        scratch.mkdir(parents=True, exist_ok=True)
        mem = None if device == "cuda" else int(self.ec.memory_limit_gb * 2**30)
        wrap = ncu.wrapper(profiler) if profiler else None
        server = zygote.server(device) if self.ec.fork_workers else None
        extra = {}
        if device == "cuda" and self.ec.fused_comparison and wrap is None:
            # the one-pass comparison kernel made while the worker waits for its job
            extra[COMPARE_CACHE_VAR] = str(compare_cache(self.launchers.folder))
        worker = WorkerProcess(scratch, device, gpu_index, self.ec.cpu_time_limit_s, mem,
                               wrap=wrap, zygote=server, extra_env=extra)
        if server is None and self.ec.fork_workers and wrap is None:
            worker.fork_error = zygote.why_not(device)  # the server refused: each record says why
        return worker

    def _prestart(self, device: str) -> bool:
        """Spares are the default on a GPU (16 cores, memory to spare); on the CPU they would
        only compete with the running workers for the cores, unless asked for."""
        wanted = self.ec.prestart_workers
        return bool(wanted if wanted is not None else device == "cuda")

    def _take(self, device: str, gpu_index: int | None, profiler: str | None = None) -> WorkerProcess | None:
        """The spare waiting on this device (then start its successor), or None.

        Workers under Nsight Compute are spares of their own: starting Python under ncu takes
        ~12 s on the H200, which would otherwise sit between every verdict and the next
        iteration.
        """
        if not self._prestart(device):
            return None
        with self._spare_lock:
            spare = SPARES.take(self._spare_key(device, gpu_index, profiler))
            self._fill(device, gpu_index, profiler)
        return spare

    def _start_probe_worker(self) -> tuple | None:
        """Before the process's first hardware detection, on a machine with an NVIDIA driver:
        start the probe's worker (GPU 0) beside the detection's, so that the first problem
        waits for one worker's start, not two in a row. Returns the pool's key, or None."""
        with _HW_LOCK:
            known = os.environ.get("CUDA_VISIBLE_DEVICES", "*") in _HW_CACHE
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if known or not os.path.exists("/dev/nvidiactl") or visible in ("", "-1") or \
                not self._prestart("cuda"):
            return None
        with self._spare_lock:
            key = self._spare_key("cuda", 0, None)
            SPARES.fill(key, 1, lambda: self._spawn("cuda", 0))
        return key

    def _spare_key(self, device: str, gpu_index: int | None, profiler: str | None) -> tuple:
        """Held from its first use to :meth:`close`: what a worker was started with (the
        environment it inherits included, not the engine's whole: it changes mid-run)
        decides which evaluators may take it."""
        key = (device, gpu_index, profiler, str(self.scratch_root), self.ec.cpu_time_limit_s,
               self.ec.memory_limit_gb, self.keep_scratch, environment.digest(os.environ))
        if key not in self._spare_keys and self._finalizer.alive:
            self._spare_keys.add(key)
            SPARES.hold(key, self.keep_scratch)
        return key

    def _fill(self, device: str, gpu_index: int | None, profiler: str | None,
              want: int | None = None) -> None:
        """Start spares until ``want`` (default: as many as can run on this device at once)
        wait (under the lock)."""
        if not self._finalizer.alive:
            return
        if want is None:
            want = _spares_for(device, profiler,
                               self._slots.per_device if self._slots is not None else 1)
        SPARES.fill(self._spare_key(device, gpu_index, profiler), want,
                    lambda: self._spawn(device, gpu_index, profiler))

    def _warm_spares(self) -> None:
        """Fill every GPU's spare pools ahead of the first candidates."""
        hw = self.hardware
        if hw.device != "cuda" or not self._prestart(hw.device):
            return
        self._acquire_pool()
        binary = ncu.find_ncu() if self.ec.profile else None
        with self._spare_lock:
            for gpu in self._primary_gpus():
                self._fill(hw.device, gpu, None)
                if binary:
                    self._fill(hw.device, gpu, binary)

    def candidates_done(self) -> None:
        """The run takes no more candidates (the search calls it before the late baselines):
        its pools grow to as many spares as a fresh run starts with, so that the next run of
        this process (a bench's next problem) has them ready for its probe, its baselines and
        its first candidates. A plan for a large footprint keeps fewer (two per worker slot);
        beside the one worker left, the GPU has room for more (``spares_beside_one``)."""
        hw = self.hardware
        if hw.device != "cuda" or self._slots is None or not self._prestart(hw.device):
            return
        want = min(_spares_for(hw.device, None, self._per_device()),
                   spares_beside_one(self.plan, hw, self.ec.gpu_memory_fraction))
        with self._spare_lock:
            for gpu in self._primary_gpus():
                self._fill(hw.device, gpu, None, want)  # (a pool never shrinks here)

    def _primary_gpus(self):
        hw = self.hardware
        return self._devices_of(self.targets.primary) or range(max(1, hw.num_gpus))


def _spares_for(device: str, profiler: str | None, per_device: int) -> int:
    """Spares to keep for ``per_device`` workers at once on a device.

    An iteration's burst of candidates all find warm workers, and the next burst finds them
    again: on a GPU two per slot, since a templated candidate takes two in a row (its sweep,
    then its winner's evaluation) and a spare takes ~10 s to start on a busy H200; profiles
    follow verdicts one by one, so half as many wait under ncu.
    """
    if profiler:
        return max(1, per_device // 2)
    if device == "cuda":  # (at most 8 a GPU: each a process with torch and a context)
        return min(per_device * SPARES_PER_SLOT, max(per_device, 8))
    return per_device


def _present_archs(hw: Hardware) -> tuple[str, ...]:
    """Each visible GPU's arch (a record without them: every GPU taken as the first's kind)."""
    if hw.device != "cuda":
        return ()
    return hw.gpu_archs or (hw.gpu_arch,) * max(1, hw.num_gpus)


def arch_entry(result: EvalResult, slot: int | None) -> dict:
    """One architecture's outcome, as kept in ``metadata["by_arch"]``."""
    return {"status": result.get_status().value, "runtime": result.runtime,
            "runtime_improvement": result.runtime_improvement, "gpu_slot": slot}


def arch_line(arch: str, where: str, result: EvalResult) -> str:
    """A line of the log for a result on another architecture (``where``: its GPU slot or
    node), and why, when it failed."""
    status = result.get_status()
    head = f"On {arch} ({where}): {STATUS_LABELS[status].lower()}"
    if result.correctness and result.runtime_improvement > 0:
        return f"{head}, {result.runtime:.4f} ms, {speedup_text(result.runtime_improvement)} the reference"
    why = [line for line in result.eval_log.splitlines() if line.strip()][:6]
    return head + ("\n  " + "\n  ".join(why) if why else "")
