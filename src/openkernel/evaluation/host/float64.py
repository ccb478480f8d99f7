"""The task's float64 answer of the main input set, made once (worker/float64.py) and kept.

The precision check of every candidate compares with the reference run in float64 on the main
input set. Where that run is costly (on the host CPU: a level-2 GEMM's 1.4e11 FLOPs, ~10 s a
winner on the H200 with four at once), a worker that runs no candidate makes it once (on the
device where it fits there without a candidate: ``MemoryPlan.answer_on_device``), beside
the first candidates' builds, and writes it under ``<build cache>/../float64/``: a folder a
candidate's worker may read (``Job.read_only``) but not write. Its name digests what decides
the answer (the task's code, the hardware, the workers' software), so later jobs and runs
find it; a check whose inputs or weights differ from the answer's runs the float64 reference
itself, as does one that starts before the answer is written.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from openkernel.evaluation.host.baselines import environment_key
from openkernel.evaluation.protocol import FLOAT64_FORMAT, float64_failed
from openkernel.records import Hardware, MemoryPlan, TaskProbe

MAX_BYTES = 256 << 20  # larger answers: reading them back costs about what the run does
# Below this the float64 run costs a check less than a worker's start: on the CPU it runs in
# each check. On a GPU it is made once all the same: run in a check it holds about twice the
# problem's footprint beside the check's own data (level3/4 LeNet5 on the H200, session 20:
# every candidate's worker at 3.1-4.3x its footprint, the precision step the highest).
MIN_FLOPS = 1e10
# A check that needs the answer while it is being made waits this long for it, then runs its
# own: four checks running theirs at once on the host took ~10 s each (level-2 GEMMs, H200).
WAIT_S = 30.0


def why_not(once: bool | None, plan: MemoryPlan, probe: TaskProbe) -> str:
    """Why the answer is not made once for this task ("" when it is); ``once``:
    ``eval_config.float64_once`` (None: on a GPU, and where it is costly)."""
    if once is False:
        return "eval_config.float64_once is off"
    if plan.precision_set != "main":
        return "the precision check does not run on the main input set"
    fp = probe.memory
    if fp is None:
        return "the probe measured no footprint"
    if 2 * fp.output_bytes > MAX_BYTES:
        return "the outputs in float64 take more than 256 MiB"
    if once is None and not plan.precision_on_host and probe.flops < MIN_FLOPS and \
            not plan.budget_bytes:  # (a device's plan has a budget; the CPU's none)
        return "the float64 run is cheap here"
    return ""


def answer_path(root: Path, digest: str, hw: Hardware) -> Path:
    key = hashlib.sha256(f"{FLOAT64_FORMAT}\n{digest}\n{hw.label}\n{environment_key(hw)}"
                         .encode()).hexdigest()[:24]
    return root / f"{key}.pt"


class Float64Answer:
    """One evaluator's answer: where it is (or will be), and how its making went."""

    def __init__(self, ev):
        self.ev = ev
        self.root = ev.build_cache_root.parent / "float64"
        self.path: Path | None = None
        self.note = ""  # how the answer was had: stored, made (and in how long), or why not
        self.done = threading.Event()

    @property
    def wait_s(self) -> float:
        """How long a check may wait for the answer: ``WAIT_S`` while it is being made and the
        check's own run would be on the host (the answer itself made there, or on the device
        where the plan lets every worker be at its checks at once: ``answer_on_device``).
        Otherwise the answer's making needs a check's share of the GPU, which waiting checks
        would hold: they run their own there, as cheaply."""
        making = self.path is not None and not self.done.is_set()
        return WAIT_S if making and self.ev.plan.precision_on_host else 0.0

    @property
    def failed(self) -> Path | None:
        """The marker left beside an answer that could not be made (waiting checks stop)."""
        return float64_failed(self.path) if self.path else None

    def start(self, probe: TaskProbe) -> None:
        """Find the stored answer, or start making it (a thread); nothing when not wanted."""
        ev = self.ev
        why = why_not(ev.ec.float64_once, ev.plan, probe)
        if why:
            self.note = f"float64 answer: computed in each check ({why})"
            self.done.set()
            return
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = answer_path(self.root, ev.task.digest, ev.hardware)
        if self.path.exists() and not ev.ec.fresh_baselines:
            self.note = "float64 answer: stored"
            self.done.set()
            return
        self.failed.unlink(missing_ok=True)  # an earlier run's: this one tries again
        threading.Thread(target=self._make, daemon=True, name="float64-answer").start()

    def _make(self) -> None:
        ev, hw = self.ev, self.ev.hardware
        made = False
        try:
            job = ev._task_job(hw.device, "float64", plan=ev.plan.to_json(),
                               overlap_checks=ev.ec.overlap_checks)
            slot = ev._acquire()
            try:
                run = ev._run(job, hw.device, slot, label="float64-answer")
            finally:
                ev._release(slot)
            payload = run.payload or {}
            if payload.get("float64"):
                made = True
                where = "on the host CPU" if payload.get("on_host") else f"on {hw.device}"
                self.note = (f"float64 answer: made once {where} in {payload.get('seconds')} s "
                             f"({payload.get('bytes', 0) / 2**20:.1f} MiB)")
            else:
                what = payload.get("why") or payload.get("fatal") or (
                    f"timed out in {run.phase}" if run.timed_out else "the worker died")
                self.note = f"float64 answer: not made ({what}); each check computes its own"
        except Exception as err:  # stopped (Aborted) or failed: each check computes its own
            self.note = f"float64 answer: not made ({type(err).__name__}: {err})"
        finally:
            if not made:
                try:
                    self.failed.touch()  # checks waiting for it stop waiting
                except OSError:
                    pass
            self.done.set()
