"""The Ray executor (``executor: ray``): candidates judged by GPU actors across a Ray cluster.

:class:`RayEvaluator` stands where the search loop's :class:`Evaluator` stands, with the same
methods. It joins the cluster (``ray.address``), starts one :class:`~ray_node.GpuActor` per
GPU (``num_gpus=1``, ``ray.cpus_per_gpu`` CPUs for builds), ships the task's files to each,
and sends every candidate's code to the least-loaded actor; the actor's own Evaluator judges it
on that node exactly as the local pipeline would (its confined worker, its GPU's turn). Only
code goes out and typed records come back; the engine stays the only writer of the database.

Phases come back as a streaming generator's items, so the event stream still says queued,
building, testing, timing. A candidate whose actor dies (its node gone, the actor crashed,
its objects lost) is sent again to another live actor and says so in ``metadata["requeued"]``;
each candidate carries an idempotency key (its label and code), so the first verdict for a key
is the one kept and returned, and a node asked again returns its kept verdict instead of
judging twice. The actors themselves are kept by a :class:`~ray_fleet.Fleet`: a lost one is
replaced once a GPU is free again, and a GPU node that joins mid-run gets one (up to
``ray.gpus``); the run ends (NoDeviceLeft) only when none is left nor coming.

Several targets (``gpu_arch: [sm_90, sm_80]``) as the local pipeline has them: candidates are
judged on actors of the primary architecture (the first configured one the cluster has), and
each correct one is judged again on one actor of each other configured architecture the
cluster has then, kept in ``metadata["by_arch"]``.

Ray is an optional extra; nothing imports this module unless ``executor: ray``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable

from openkernel.config import Config
from openkernel.errors import OpenKernelError
from openkernel.evaluation.host.baselines import environment_key
from openkernel.evaluation.host.devices import NoDeviceLeft
from openkernel.evaluation.host.executor import arch_entry, arch_line
from openkernel.evaluation.host.ray_fleet import Fleet, Member
from openkernel.evaluation.host.ray_node import (
    ALIVE,
    GpuActor,
    JudgeReply,
    JudgeRequest,
    pack_task,
)
from openkernel.records import Hardware, MemoryPlan, TaskProbe, baseline_kind
from openkernel.schemas import EvalResult
from openkernel.targets import TargetPlan, plan_targets, same_arch
from openkernel.task import Task

INSTALL_HINT = "pip install 'openkernel[ray]'"
# Actors take a node's default share of candidates (at most 8 per GPU, as the local pipeline),
# plus room for the engine's small calls (busy, close) beside them.
_ACTOR_CONCURRENCY = 8 + 4
_SILENT_S = 120.0  # a judge stream with no item for this long: its node is taken as lost
_JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # a Ray job's config, set for its entrypoint


def import_ray():
    """Ray, or one clear message naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise OpenKernelError(f"executor: ray needs Ray, which is not installed here: "
                              f"{INSTALL_HINT}") from None
    return ray


class RayEvaluator:
    """An Evaluator whose candidates run on the GPU actors of a Ray cluster.

    Args:
        task: The task; its files are sent to every node.
        config: The run's configuration (``ray``, ``eval_config``).
        store: Where the first actor's reference timings (eager, torch.compile, max-autotune)
            are kept for the bench table, as the local pipeline keeps its own.
    """

    def __init__(self, task: Task, config: Config, store=None):
        self.ray = import_ray()
        self.task, self.config, self.store = task, config, store
        self._baselines: dict | None = None
        self.incumbent_speedup = 0.0
        self.notes: list[str] = []
        self.pch: dict = {}
        self.plan = MemoryPlan()
        self.baseline_error = ""
        self._probe: TaskProbe | None = None
        self._targets: TargetPlan | None = None
        self._routed: str | None = None  # the primary's architecture, when actors have it
        self.fleet = Fleet(self.ray, config.ray, self.notes)
        self._ready = threading.Lock()
        self._settled: dict[str, JudgeReply] = {}  # idempotency key -> the verdict kept
        self.duplicates = 0  # verdicts that arrived for a key already settled
        self._arch_judged: set[str] = set()  # keys judged on the other architectures too
        self._started_ray = False
        self.where = ""  # said once the actors are up

    # -- what the search loop reads ----------------------------------------------------------
    @property
    def hardware(self) -> Hardware:
        """The first actor's node's (known once probed; a placeholder until then)."""
        if self._probe is None or self._probe.hardware is None:
            return Hardware(label="Ray cluster (not joined)", device="cpu", gpu_arch="cpu")
        return self._probe.hardware

    @property
    def targets(self) -> TargetPlan:
        return self._targets

    @property
    def max_workers(self) -> int:
        """Candidates at once: every live primary actor's share, capped by
        ``eval_config.max_workers``."""
        total = sum(m.info.max_workers for m in self.fleet.live if m.serves(self._routed)) or 1
        cap = self.config.eval_config.max_workers
        return min(total, cap) if cap else total

    def probe(self) -> TaskProbe:
        """Join the cluster, start the GPU actors and probe the task on each (once)."""
        if self._probe is None:
            self._probe = self._start()
        return self._probe

    def evaluate(self, code: str, backend: str, label: str = "", *,
                 on_phase: Callable[[str], None] | None = None,
                 source_name: str | None = None) -> EvalResult:
        reply = self._submit(JudgeRequest(_key("evaluate", label, backend, code), "evaluate",
                                          code, backend, label, source_name=source_name,
                                          incumbent_speedup=self.incumbent_speedup), on_phase)
        self._other_archs(reply, code, backend, label)
        return reply.result

    def evaluate_template(self, code: str, backend: str, label: str = "",
                          variants: list | None = None,
                          on_phase: Callable[[str], None] | None = None,
                          ) -> tuple[EvalResult, str | None]:
        reply = self._submit(JudgeRequest(_key("template", label, backend, code), "template",
                                          code, backend, label, variants=variants,
                                          incumbent_speedup=self.incumbent_speedup), on_phase)
        if reply.winner_code:
            self._other_archs(reply, reply.winner_code, backend, label)
        return reply.result, reply.winner_code

    def gpu_busy(self, since: float | None = None) -> dict[int, dict]:
        """Per GPU (actor index): seconds its timed turns were held, on this clock."""
        shift = time.time() - time.monotonic()  # the nodes answer in wall-clock seconds
        wall_since = None if since is None else since + shift
        out: dict[int, dict] = {}
        for actor in list(self.fleet.live):
            try:
                busy = self.ray.get(actor.handle.busy.remote(wall_since), timeout=30)
            except Exception:  # noqa: BLE001 - a node gone by the end: no report for it
                continue
            for entry in busy.values():  # one GPU per actor
                for key in ("intervals", "timed"):
                    entry[key] = [(a - shift, b - shift) for a, b in entry.get(key, [])]
                out[actor.index] = entry
        return out

    def baselines(self) -> dict | None:
        """The reference's timings as a live primary actor measured them on its GPU (each node
        times the reference once for its own verdicts); kept in the store under that node's
        hardware, so the bench table has them. None on CPU nodes, or when timing failed
        (``baseline_error`` says why)."""
        actor = next((m for m in self.fleet.live if m.serves(self._routed)), None)
        if self._baselines is not None or actor is None:
            return self._baselines
        hw = self.hardware
        if hw.device != "cuda":
            return None
        ec = self.config.eval_config
        # the node's worker(s) make each baseline under its wall, once more per one timed out
        walls = ec.baseline_timeout_s
        wait = 3 * (ec.build_timeout_s + ec.test_timeout_s) + walls.eager + walls.compile + \
            walls.autotune + walls.cudagraphs + 60
        try:
            stats, why = self.ray.get(actor.handle.baselines.remote(), timeout=wait)
        except Exception as err:  # noqa: BLE001 - the node was lost meanwhile
            self.baseline_error = f"timing the reference on the Ray node failed: {err}"
            return None
        self.baseline_error = why or ""
        if stats:
            self._baselines = stats
            key = environment_key(hw)
            if self.store is not None and key:
                median = (stats.get("compile") or stats.get("eager") or {}).get("median", -1.0)
                self.store.put_reference_timing(self.task.digest, hw.label,
                                                baseline_kind(ec.allow_tf32), median, stats, key)
        return self._baselines

    def close(self) -> None:
        """Stop every actor (each stops its spare workers) and the Ray this run started."""
        self.fleet.close()
        if self._started_ray and self.ray.is_initialized():
            self.ray.shutdown()

    # -- starting --------------------------------------------------------------------------
    def _start(self) -> TaskProbe:
        ray, rc = self.ray, self.config.ray
        silent = _unanswered(rc.address)
        if silent:
            return self._failed(silent)
        try:  # read before joining: inside a Ray job, its working dir is Ray's to rewrite
            files = pack_task(self.task)
        except (OSError, ValueError) as err:
            return self._failed(str(err))
        try:
            if not ray.is_initialized():
                _leave_job_working_dir()
                ray.init(address=rc.address, include_dashboard=False, logging_level="WARNING",
                         log_to_driver=False, configure_logging=False)
                self._started_ray = True
            gpus = rc.gpus or int(ray.cluster_resources().get("GPU", 0))
        except Exception as err:  # noqa: BLE001 - no cluster there, a version mismatch, ...
            return self._failed(f"ray.address={rc.address!r}: could not join a Ray cluster "
                                f"({type(err).__name__}: {err}); a head started with token "
                                f"authentication needs RAY_AUTH_MODE=token and its token here "
                                f"(README: Past one machine)")
        if gpus < 1:
            return self._failed("executor: ray: the Ray cluster has no GPU resources: start "
                                "each GPU node with `ray start --address=HEAD:6379 --num-gpus=N`")
        remote = ray.remote(GpuActor).options(
            num_gpus=1, num_cpus=rc.cpus_per_gpu, max_concurrency=_ACTOR_CONCURRENCY,
            max_restarts=0, max_task_retries=0)  # the engine re-queues; Ray never re-runs
        omp = os.environ.get("OMP_NUM_THREADS")
        errors = self.fleet.start(lambda: remote.remote(files, self.config, omp), gpus)
        live = list(self.fleet.live)
        if self.fleet.placing:
            self.notes.append(f"executor: ray: {self.fleet.placing} of {gpus} GPU actors were "
                              f"not placed within {rc.start_timeout_s:g} s; judging on "
                              f"{len(live)} (the others join once Ray places them)")
        if not live:
            why = errors[0] if errors else (f"no actor was placed within "
                                            f"{rc.start_timeout_s:g} s")
            return self._failed(f"executor: ray: no GPU actor could judge candidates: {why}")
        archs = self._plan_targets(live)
        first = next(m for m in live if m.serves(self._routed)).info  # the primary's hardware
        self.plan, self.pch = first.plan, first.pch
        nodes = sorted({m.info.node for m in live})
        self.where = (f"executor: ray: {len(live)} GPU actor(s) on {len(nodes)} "
                      f"node(s): {', '.join(nodes)}"
                      + (f"; architectures {', '.join(archs)}" if archs else ""))
        return first.probe

    def _plan_targets(self, live: list[Member]) -> list[str]:
        """The configured architectures split by the actors' (``targets.py``), as the local
        pipeline splits them by its GPUs'; returns the architectures the actors have."""
        present = [m.info.arch for m in live if m.info.arch]
        fallback = live[0].info.targets.primary if live[0].info.targets else "cpu"
        self._targets = plan_targets(self.config.gpu_archs, present, fallback)
        primary = self._targets.primary
        # candidates go to the primary's actors when there are any; else (no actor knows its
        # architecture: CPU nodes without a label) to every actor
        self._routed = primary if any(same_arch(primary, a) for a in present) else None
        return sorted(set(present))

    def _failed(self, error: str) -> TaskProbe:
        return TaskProbe(ok=False, error=error)

    # -- judging ---------------------------------------------------------------------------
    def _submit(self, request: JudgeRequest, on_phase, arch: str | None = None) -> JudgeReply:
        """Judge on a live actor (of ``arch``; default: the primary's); re-queue on another
        while actors are lost under it."""
        requeued: list[str] = []
        while True:
            kept = self._settled.get(request.key)
            if kept is not None:  # this candidate was judged already: its one verdict
                return kept
            actor = self.fleet.take(arch or self._routed)
            try:
                reply = self._stream(actor, request, on_phase)
            except self._lost_errors() as err:
                self.fleet.lose(actor, f"{type(err).__name__}")
                requeued.append(f"lost with node {actor.info.node} ({type(err).__name__}); "
                                f"re-queued on another GPU actor")
                continue
            finally:
                self.fleet.give(actor)
            if reply.no_device:
                self.fleet.lose(actor, reply.no_device)
                requeued.append(f"node {actor.info.node}: {reply.no_device}; re-queued")
                continue
            if reply.error:
                raise RuntimeError(f"on node {actor.info.node}: {reply.error}")
            self._take_notes(actor, reply)
            return self._settle(reply, requeued)

    def _stream(self, actor: Member, request: JudgeRequest, on_phase) -> JudgeReply:
        ray = self.ray
        stream = actor.handle.judge.options(num_returns="streaming").remote(request)
        while True:
            # The node says it is alive every few seconds: one silent for long is lost.
            ready, _ = ray.wait([stream], timeout=_SILENT_S)
            if not ready:
                raise _StreamEnded(actor.info.node)
            try:
                ref = next(stream)
            except StopIteration:
                raise _StreamEnded(actor.info.node) from None
            item = ray.get(ref, timeout=_SILENT_S)
            if isinstance(item, JudgeReply):
                return item
            if on_phase is not None and item != ALIVE:
                on_phase(item)

    def _settle(self, reply: JudgeReply, requeued: list[str]) -> JudgeReply:
        """Keep the first verdict per key; a later one for the same key is dropped."""
        with self._ready:
            kept = self._settled.setdefault(reply.key, reply)
            if kept is not reply:
                self.duplicates += 1
                return kept
        if requeued:
            reply.result.metadata.setdefault("requeued", []).extend(requeued)
        return reply

    def _other_archs(self, reply: JudgeReply, code: str, backend: str, label: str) -> None:
        """Judge a correct candidate again on one actor of each other configured architecture
        the cluster has now, as the local pipeline does on its GPUs; the verdict stays the
        primary one's, each other gets its entry in ``by_arch`` and a line in the log."""
        result = reply.result
        if self._routed is None or len(self.config.gpu_archs) < 2:
            return
        with self._ready:
            if reply.key in self._arch_judged:  # the same candidate asked again: done once
                return
            self._arch_judged.add(reply.key)
        primary = self._targets.primary
        first = result.metadata.get("by_arch", {}).get(primary) or arch_entry(result, None)
        by_arch = result.metadata["by_arch"] = {primary: {**first, "ray_node": reply.node}}
        if not result.correctness:
            return
        have = {m.info.arch for m in self.fleet.live if m.info.arch}
        lines = []
        for arch in self.config.gpu_archs:
            if same_arch(arch, primary) or not any(same_arch(arch, a) for a in have):
                continue
            request = JudgeRequest(_key("evaluate", f"{label}@{arch}", backend, code),
                                   "evaluate", code, backend, f"{label}@{arch}",
                                   incumbent_speedup=self.incumbent_speedup)
            try:
                other = self._submit(request, None, arch=arch)
            except NoDeviceLeft as err:  # that architecture is gone; the primary verdict stands
                lines.append(f"On {arch}: not run ({err})")
                continue
            by_arch[arch] = {**arch_entry(other.result, None), "ray_node": other.node}
            lines.append(arch_line(arch, f"node {other.node}", other.result))
        if lines:
            result.eval_log = "\n".join([result.eval_log.rstrip(), *lines]).strip()

    def _take_notes(self, actor: Member, reply: JudgeReply) -> None:
        with self._ready:
            for note in reply.notes[actor.notes_seen:]:
                self.notes.append(f"node {actor.info.node}: {note}")
            actor.notes_seen = max(actor.notes_seen, len(reply.notes))

    def _lost_errors(self) -> tuple[type[BaseException], ...]:
        ex = self.ray.exceptions
        names = ("RayActorError", "ObjectLostError", "WorkerCrashedError", "NodeDiedError",
                 "ObjectFetchTimedOutError", "LocalRayletDiedError")
        return (_StreamEnded, *(getattr(ex, n) for n in names if hasattr(ex, n)))


def _leave_job_working_dir() -> None:
    """Inside a Ray job (``ray job submit --working-dir``), join without the job's working_dir.

    The engine joins with the job's runtime env, and its actors inherit it (Ray merges a
    runtime env per key and cannot unset one). With the working_dir in it, each node's agent
    that sets the env up unpacks the job's package again, removing the folder first: under the
    engine's feet and under actors starting in it (the nodes of a one-host cluster share it),
    so actors failed their runtime env or missed their files. Neither needs it: the task's
    files travel as data (``pack_task``), openkernel is installed on every node, and the
    engine's own working directory stays the job's.
    """
    try:
        job = json.loads(os.environ.get(_JOB_CONFIG_VAR) or "{}")
    except ValueError:  # not ours to judge: Ray says what is wrong with it
        return
    env = job.get("runtime_env") if isinstance(job, dict) else None
    if isinstance(env, dict) and env.pop("working_dir", None) is not None:
        os.environ[_JOB_CONFIG_VAR] = json.dumps(job)


def _unanswered(address: str | None, timeout_s: float = 5.0) -> str:
    """Why nothing answers at a ``host:port`` cluster address ("" when something does, and
    for ``auto`` or none, which Ray resolves itself): Ray alone would wait for minutes."""
    if not address or address == "auto":
        return ""
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        return ""  # not host:port: Ray says what is wrong with it
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return ""
    except OSError as err:
        why = err.strerror or str(err) or type(err).__name__
    return (f"ray.address={address!r}: nothing answers at {host}:{port} ({why}); is the "
            f"cluster's head started there (`ray start --head --port={port}`) and its port "
            f"open to this host?")


class _StreamEnded(Exception):
    """A judge stream ended without its verdict (its actor went away mid-stream)."""


def _key(kind: str, label: str, backend: str, code: str) -> str:
    """A candidate's idempotency key: what it is and where the search put it."""
    digest = hashlib.sha256(f"{kind}\0{backend}\0{code}".encode()).hexdigest()[:20]
    return f"{label}:{digest}"
