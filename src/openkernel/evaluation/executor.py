"""The engine's side of evaluation: one fresh, confined worker process per candidate.

:class:`Evaluator` is what the search loop calls. It never imports candidate code (nor touches
CUDA) itself: every job - hardware detection, the task probe, a candidate, the torch.compile
reference timing - runs in ``python -m openkernel.evaluation.worker`` with a scratch directory
as its cwd, an environment from ``sandbox.worker_env`` (no secrets), resource limits from
``sandbox.limits_preexec`` and its own process group, so a timeout kills it and everything it
started. The worker reports phases over a pipe; the build timeout covers start-up, import and
the first (compiling) call, the test timeout covers correctness and benchmark.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from pathlib import Path

from openkernel.config import Config
from openkernel.evaluation import ceilings
from openkernel.evaluation.devices import DevicePool, NoDeviceLeft, is_device_fault
from openkernel.evaluation import hardware as hwmod
from openkernel.evaluation import sandbox
from openkernel.evaluation.ncu_runs import profile_candidate
from openkernel.evaluation.process import WorkerRun, run_worker
from openkernel.evaluation.results import from_worker
from openkernel.evaluation.types import Hardware, TaskProbe
from openkernel.schemas import EvalResult
from openkernel.task import Task

_HW_CACHE: dict[str, Hardware] = {}  # per engine process: the hardware does not change
_HW_LOCK = threading.Lock()


class Evaluator:
    """Builds, checks and times candidates for one task, each in its own worker process.

    Args:
        task: The task (reference + hooks).
        config: The run's configuration (``eval_config``, ``paths.scratch_dir``).
        store: Where the torch.compile reference timing is cached (per task and hardware);
            None keeps it in memory.
        bench_budget_s: Seconds of timed trials per candidate (default 2 on a GPU, 1 on the CPU).
        keep_scratch: Keep each candidate's scratch directory (for debugging).
    """

    def __init__(self, task: Task, config: Config, store=None, *, bench_budget_s: float | None = None,
                 keep_scratch: bool = False):
        self.task, self.config, self.store = task, config, store
        self.ec = config.eval_config
        self.bench_budget_s = bench_budget_s
        self.keep_scratch = keep_scratch or bool(os.environ.get("OPENKERNEL_KEEP_SCRATCH"))
        self.scratch_root = Path(config.paths.scratch_dir).expanduser().resolve()
        self._slot_lock = threading.Lock()
        self._compile_lock = threading.Lock()
        self._probe: TaskProbe | None = None
        self._compile_ratio: float | None | bool = None  # False: tried and unavailable
        self._slots: DevicePool | None = None

    # -- public API ---------------------------------------------------------------------
    @property
    def hardware(self) -> Hardware:
        """What candidates run on (detected once, in a worker process)."""
        key = os.environ.get("CUDA_VISIBLE_DEVICES", "*")
        with _HW_LOCK:
            if key not in _HW_CACHE:
                run = self._run({"mode": "hardware", "known_ceilings": ceilings.load_all()},
                                "cuda", None, label="hardware")
                if (run.payload or {}).get("ceilings_measured"):
                    ceilings.save(run.payload["ceilings"])  # measured once per device model
                data = (run.payload or {}).get("hardware")
                _HW_CACHE[key] = hwmod.from_json(data) if data else Hardware(
                    label=hwmod.CPU_LABEL, device="cpu", gpu_arch="cpu", interpreter=True)
            return _HW_CACHE[key]

    @property
    def max_workers(self) -> int:
        if self.ec.max_workers:
            return self.ec.max_workers
        hw = self.hardware
        return max(1, hw.num_gpus) if hw.device == "cuda" else 2

    def probe(self) -> TaskProbe:
        """Load the task in a worker, run the reference once and describe it (cached)."""
        if self._probe is not None:
            return self._probe
        hw = self.hardware
        run = self._run({"mode": "probe", **self._task_job(hw.device)}, hw.device,
                        0 if hw.device == "cuda" else None, label="probe")
        data = (run.payload or {}).get("probe")
        if data:
            data["hardware"] = Hardware(**data["hardware"]) if data.get("hardware") else hw
            probe = TaskProbe(**data)
        else:
            what = f"timed out after {self.ec.build_timeout_s:g} s" if run.timed_out else (
                (run.payload or {}).get("fatal") or "the worker died")
            probe = TaskProbe(ok=False, hardware=hw, error=(
                f"{self.task.reference_path}: probing the task failed: {what}\n{run.log_tail}"))
        self._probe = probe
        return probe

    def evaluate(self, code: str, backend: str, label: str = "") -> EvalResult:
        """Build, check and time one candidate; never raises for candidate faults."""
        hw = self.hardware
        job = {"mode": "evaluate", "backend": backend, **self._task_job(hw.device),
               "correctness_seeds": self.ec.correctness_seeds, "gpu_arch": self.config.gpu_arch
               or hw.gpu_arch, "build_timeout_s": self.ec.build_timeout_s,
               "gpu_memory_fraction": self.ec.gpu_memory_fraction, **self._bench_params(hw)}
        requeued: list[str] = []
        while True:
            slot = self._acquire()
            try:
                run = self._run(job, hw.device, slot, label=label, code=code)
            finally:
                self._release(slot)
            if slot is None or not is_device_fault(run.log_tail):
                break
            # The GPU failed, not the candidate: quarantine it and judge the candidate elsewhere.
            self._slots.quarantine(slot, run.log_tail.splitlines()[-1][:200] if run.log_tail else "")
            requeued.append(f"GPU slot {slot} failed as a device; re-queued on another GPU")
            if not self._slots.healthy:
                raise NoDeviceLeft(f"every GPU failed; last: {run.log_tail[-500:]}")
        ratio = None
        payload = run.payload or {}
        if hw.device == "cuda" and payload.get("correctness") and not payload.get("integrity_violation"):
            ratio = self._compile_speed_ratio(hw)
        result = from_worker(run.payload, phase=run.phase, timed_out=run.timed_out,
                             returncode=run.returncode, log_tail=run.log_tail, hw=hw,
                             probe=self._probe, compile_ratio=ratio,
                             limits={"build_timeout_s": self.ec.build_timeout_s,
                                     "test_timeout_s": self.ec.test_timeout_s})
        result.metadata.update(label=label, backend=backend, evaluation_s=round(run.wall_s, 3),
                               phase_s=run.phase_seconds(), gpu_slot=slot)
        if requeued:
            result.metadata["requeued"] = requeued
        if hw.device == "cuda" and result.correctness and self.ec.profile:
            profile_candidate(self, code, result)
        # Defence in depth: workers never see secrets, but nothing printed may carry one out.
        result.eval_log = sandbox.redact(result.eval_log, sandbox.secret_values(os.environ))
        return result

    def close(self) -> None:
        """Nothing persistent to release: workers are per job; scratch dirs are removed."""

    # -- helpers --------------------------------------------------------------------------
    def _task_job(self, device: str) -> dict:
        t = self.task
        read_only = [str(t.folder or t.reference_path.parent)]
        return {"device": device, "reference_path": str(t.reference_path),
                "hooks_path": str(t.hooks_path) if t.hooks_path else None, "read_only": read_only}

    def _bench_params(self, hw: Hardware) -> dict:
        gpu = hw.device == "cuda"
        budget = self.bench_budget_s if self.bench_budget_s is not None else (2.0 if gpu else 1.0)
        return {"bench_budget_s": budget, "min_trials": 10 if gpu else 3,
                "max_trials": 2000 if gpu else 50}

    def _acquire(self) -> int | None:
        hw = self.hardware
        if hw.device != "cuda":
            return None
        with self._slot_lock:
            if self._slots is None:
                gpus = list(range(max(1, hw.num_gpus)))
                per_device = max(1, -(-self.max_workers // len(gpus)))
                self._slots = DevicePool(gpus, per_device)
        return self._slots.acquire()

    def _release(self, slot: int | None) -> None:
        if slot is not None and self._slots is not None:
            self._slots.release(slot)

    def _run(self, job: dict, device: str, gpu_index: int | None, label: str = "",
             code: str | None = None, wrap=None) -> "WorkerRun":
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in label)[:40] or "job"
        scratch = self.scratch_root / f"{name}-{uuid.uuid4().hex[:8]}"
        scratch.mkdir(parents=True, exist_ok=True)
        try:
            if code is not None:
                (scratch / "candidate.py").write_text(code, encoding="utf-8")
                job = {**job, "code_path": str(scratch / "candidate.py")}
            job = {**job, "scratch": str(scratch)}
            mem = None if device == "cuda" else int(self.ec.memory_limit_gb * 2**30)
            return run_worker(job, scratch, device, gpu_index, self.ec.build_timeout_s,
                              self.ec.test_timeout_s, self.ec.cpu_time_limit_s, mem, wrap=wrap)
        finally:
            if not self.keep_scratch:
                shutil.rmtree(scratch, ignore_errors=True)

    def _compile_speed_ratio(self, hw: Hardware) -> float | None:
        """torch.compile median / eager median of the reference, once per task and hardware."""
        with self._compile_lock:
            if self._compile_ratio is not None:
                return self._compile_ratio or None
            cached = self.store.reference_timing(self.task.digest, hw.label, "compile") if self.store else None
            if cached is not None:
                stats = cached.runtime_stats
            else:
                job = {"mode": "reference", **self._task_job(hw.device), **self._bench_params(hw)}
                slot = self._acquire()  # a GPU of its own: never timed next to a candidate
                try:
                    run = self._run(job, hw.device, slot, label="reference-compile")
                finally:
                    self._release(slot)
                stats = run.payload if run.payload and "compile" in run.payload else None
                if stats and self.store is not None:
                    self.store.put_reference_timing(self.task.digest, hw.label, "compile",
                                                    stats["compile"]["median"], stats)
            try:
                ratio = stats["compile"]["median"] / stats["eager"]["median"]
            except (TypeError, KeyError, ZeroDivisionError):
                ratio = None
            self._compile_ratio = ratio if ratio else False
            return ratio

