"""What runs on a Ray node: one actor per GPU, holding an :class:`Evaluator` for the task.

An actor (not a task per candidate) because what the local pipeline keeps per GPU must live
somewhere on the node: the hardware record, the task's probe and memory plan, the spare
workers with torch imported, the build cache and, above all, the GPU's turn, so that
candidates build side by side on the node's cores while only one at a time runs its tests and
timed trials on the GPU. A task per candidate with ``num_gpus=1`` would re-probe each time
and serialise the builds too. The actor asks Ray for ``num_gpus=1`` (Ray sets
``CUDA_VISIBLE_DEVICES``) and ``ray.cpus_per_gpu`` CPUs for the builds.

The actor itself never runs candidate code: each candidate still runs in its own confined
worker process (``python -m openkernel.evaluation.worker``, no secrets in its environment,
rlimits, Landlock) started by the Evaluator on this node. Phases travel back as the items of
a streaming generator, the verdict as its last item; both are plain picklable records.

An actor's architecture is its GPU's, as the worker detects it. A node whose GPUs Ray only
counts (a CPU node started with ``--num-gpus``, as the tests' clusters are) has none; its Ray
label ``openkernel/gpu-arch`` names one (``ray start ... --labels openkernel/gpu-arch=sm_80``),
so a mixed cluster's routing can be tried on CPUs. A real GPU's architecture always wins.

This module imports no Ray: the engine wraps :class:`GpuActor` with ``ray.remote``.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from openkernel.config import Config
from openkernel.evaluation.host.devices import NoDeviceLeft
from openkernel.evaluation.host.executor import Evaluator
from openkernel.records import MemoryPlan, TaskProbe
from openkernel.schemas import EvalResult
from openkernel.targets import TargetPlan
from openkernel.task import load_task

ARCH_LABEL = "openkernel/gpu-arch"  # a CPU node's logical GPUs: the architecture they stand for


@dataclass(frozen=True)
class TaskFiles:
    """A task's files as bytes (the engine's paths mean nothing on another host)."""

    name: str
    entry: str  # the file or folder to load, relative to where the files are written
    files: dict[str, bytes]


@dataclass(frozen=True)
class JudgeRequest:
    """One candidate to judge. ``key`` is its idempotency key: a node that already judged it
    answers with the kept verdict instead of judging again."""

    key: str
    kind: str  # "evaluate" or "template"
    code: str
    backend: str
    label: str
    source_name: str | None = None
    variants: list | None = None
    incumbent_speedup: float = 0.0


@dataclass
class JudgeReply:
    """The last item of a judge stream: the verdict, or why there is none."""

    key: str
    result: EvalResult | None = None
    winner_code: str | None = None
    node: str = ""  # host and Ray node id
    notes: list[str] = field(default_factory=list)  # everything the evaluator changed on its own
    no_device: str = ""  # every GPU of this actor failed as a device
    error: str = ""  # an evaluator bug (a traceback), never a candidate fault


@dataclass
class ActorInfo:
    """What the engine needs from an actor once it has probed the task."""

    probe: TaskProbe
    targets: TargetPlan | None
    plan: MemoryPlan
    pch: dict
    max_workers: int
    node: str  # host and Ray node id, as logs say it
    node_id: str = ""  # the Ray node id in full (the engine watches the node's liveness)
    arch: str | None = None  # the GPU's architecture (or the node's label); None: unknown
    pid: int = 0  # the actor's process


class GpuActor:
    """One GPU of a node (``num_gpus=1``): judges candidates for one task, several at a time."""

    def __init__(self, task_files: TaskFiles, config: Config, engine_omp_threads: str | None):
        self.node, self.node_id, self.labels = _where()
        # Ray sets OMP_NUM_THREADS to the actor's num_cpus; the local pipeline's workers inherit
        # the engine's (torch's default when unset), so put that back: the same job, timed
        # the same (single-threaded, the CPU reference ran 50x faster than the local one's).
        if engine_omp_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = engine_omp_threads
        # Everything of this actor stays in a node-local folder, removed at close.
        self.root = Path(tempfile.gettempdir()) / "openkernel-ray" / uuid.uuid4().hex[:12]
        for rel, data in task_files.files.items():
            path = self.root / "task" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        task = load_task(self.root / "task" / task_files.entry, name=task_files.name)
        config = config.model_copy(deep=True)
        config.paths.scratch_dir = str(self.root / "scratch")
        config.eval_config.max_workers = None  # this node's share: its cores, its one GPU
        self.evaluator = Evaluator(task, config, store=None)
        self._done: dict[str, JudgeReply] = {}
        self._done_lock = threading.Lock()

    def probe(self) -> ActorInfo:
        ev = self.evaluator
        probe = ev.probe()
        hw = ev.hardware
        arch = hw.gpu_arch if hw.device == "cuda" else self.labels.get(ARCH_LABEL)
        return ActorInfo(probe=probe, targets=ev.targets if probe.ok else None, plan=ev.plan,
                         pch=dict(ev.pch), max_workers=ev.max_workers, node=self.node,
                         node_id=self.node_id, arch=arch or None, pid=os.getpid())

    def judge(self, request: JudgeRequest):
        """Yields the worker's phases (str) as they come, then one :class:`JudgeReply`."""
        with self._done_lock:
            kept = self._done.get(request.key)
        if kept is not None:  # delivered again: never judged twice on one node
            yield kept
            return
        items: queue.Queue = queue.Queue()
        worker = threading.Thread(target=self._work, args=(request, items), daemon=True,
                                  name=f"judge-{request.label}")
        worker.start()
        while True:
            try:  # the evaluation is bounded by its walls; a thread gone without a reply is not
                item = items.get(timeout=ALIVE_EVERY_S)
            except queue.Empty:
                if worker.is_alive():
                    yield ALIVE  # the engine gives up on a node silent for much longer
                    continue
                try:  # it may have put its reply just before it ended
                    item = items.get_nowait()
                except queue.Empty:
                    item = JudgeReply(request.key, node=self.node,
                                      error="the judging thread ended without a verdict")
            yield item
            if isinstance(item, JudgeReply):
                return

    def baselines(self) -> tuple[dict | None, str]:
        """The reference's eager and torch.compile timings on this node's GPU (None on a CPU
        node), and why they are missing when they are."""
        stats = self.evaluator.baselines()
        return stats, self.evaluator.baseline_error

    def busy(self, wall_since: float | None) -> dict[int, dict]:
        """The GPU's timed turns since a wall-clock time, in wall-clock seconds (monotonic
        clocks of two hosts cannot be compared)."""
        shift = time.time() - time.monotonic()
        since = None if wall_since is None else wall_since - shift
        out = self.evaluator.gpu_busy(since)
        for entry in out.values():
            for key in ("intervals", "timed"):
                entry[key] = [(a + shift, b + shift) for a, b in entry[key]]
        return out

    def close(self) -> None:
        self.evaluator.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def _work(self, request: JudgeRequest, items: queue.Queue) -> None:
        ev = self.evaluator
        reply = JudgeReply(request.key, node=self.node)
        try:
            ev.incumbent_speedup = max(ev.incumbent_speedup, request.incumbent_speedup)
            if request.kind == "template":
                reply.result, reply.winner_code = ev.evaluate_template(
                    request.code, request.backend, request.label, variants=request.variants,
                    on_phase=items.put)
            else:
                reply.result = ev.evaluate(request.code, request.backend, label=request.label,
                                           on_phase=items.put, source_name=request.source_name)
            reply.result.metadata["ray_node"] = self.node
            with self._done_lock:
                self._done[request.key] = reply
        except NoDeviceLeft as err:
            reply.no_device = str(err)
        except Exception:  # noqa: BLE001 - an evaluator bug: the engine logs it
            reply.error = traceback.format_exc(limit=8)
        reply.notes = list(ev.notes)
        items.put(reply)


ALIVE = "alive"  # a judge stream's item saying the node is still at it (no phase change)
ALIVE_EVERY_S = 5.0


def pack_task(task, limit_bytes: int = 256 << 20) -> TaskFiles:
    """The task's reference (and, for a folder, every file in it) as bytes."""
    if task.folder is None:
        return TaskFiles(task.name, task.reference_path.name,
                         {task.reference_path.name: task.reference_path.read_bytes()})
    files, total = {}, 0
    for path in sorted(Path(task.folder).rglob("*")):
        rel = path.relative_to(task.folder)
        if not path.is_file() or any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
            continue
        total += path.stat().st_size
        if total > limit_bytes:
            raise ValueError(f"{task.folder}: over {limit_bytes >> 20} MiB of files to send "
                             "to the Ray nodes")
        files[str(rel)] = path.read_bytes()
    return TaskFiles(task.name, ".", files)


def _where() -> tuple[str, str, dict]:
    """This host's name and Ray node id as logs say it, the node id, and the node's labels
    (the host's name alone, outside Ray)."""
    try:
        import ray  # inside an actor Ray is there; this module needs it nowhere else

        context = ray.get_runtime_context()
        node_id = context.get_node_id()
        return (f"{socket.gethostname()}/{node_id[:12]}", node_id,
                dict(context.get_node_labels() or {}))
    except Exception:  # noqa: BLE001
        return socket.gethostname(), "", {}
