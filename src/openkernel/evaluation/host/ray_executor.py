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
judging twice. Lost actors are not replaced: the run goes on with the GPUs left, and ends
(NoDeviceLeft) when there are none.

Ray is an optional extra; nothing imports this module unless ``executor: ray``.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable

from openkernel.config import Config
from openkernel.errors import OpenKernelError
from openkernel.evaluation.host.baselines import KIND, environment_key
from openkernel.evaluation.host.devices import NoDeviceLeft
from openkernel.evaluation.host.ray_node import (
    ALIVE,
    ActorInfo,
    GpuActor,
    JudgeReply,
    JudgeRequest,
    pack_task,
)
from openkernel.records import Hardware, MemoryPlan, TaskProbe
from openkernel.schemas import EvalResult
from openkernel.targets import TargetPlan
from openkernel.task import Task

INSTALL_HINT = "pip install 'openkernel[ray]'"
# Actors take a node's default share of candidates (at most 8 per GPU, as the local pipeline),
# plus room for the engine's small calls (busy, close) beside them.
_ACTOR_CONCURRENCY = 8 + 4
_SILENT_S = 120.0  # a judge stream with no item for this long: its node is taken as lost


def import_ray():
    """Ray, or one clear message naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise OpenKernelError(f"executor: ray needs Ray, which is not installed here: "
                              f"{INSTALL_HINT}") from None
    return ray


class _Actor:
    """The engine's handle on one GPU actor."""

    def __init__(self, index: int, handle, info: ActorInfo):
        self.index, self.handle, self.info = index, handle, info
        self.inflight = 0
        self.taken = 0  # candidates sent to it so far
        self.notes_seen = 0


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
        self._actors: list[_Actor] = []
        self._pending: list = []  # actors never placed (their handles, killed at close)
        self._ready = threading.Condition()
        self._settled: dict[str, JudgeReply] = {}  # idempotency key -> the verdict kept
        self.duplicates = 0  # verdicts that arrived for a key already settled
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
        """Candidates at once: every live actor's share, capped by ``eval_config.max_workers``."""
        total = sum(a.info.max_workers for a in self._actors) or 1
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
        return reply.result

    def evaluate_template(self, code: str, backend: str, label: str = "",
                          variants: list | None = None,
                          on_phase: Callable[[str], None] | None = None,
                          ) -> tuple[EvalResult, str | None]:
        reply = self._submit(JudgeRequest(_key("template", label, backend, code), "template",
                                          code, backend, label, variants=variants,
                                          incumbent_speedup=self.incumbent_speedup), on_phase)
        return reply.result, reply.winner_code

    def gpu_busy(self, since: float | None = None) -> dict[int, dict]:
        """Per GPU (actor index): seconds its timed turns were held, on this clock."""
        shift = time.time() - time.monotonic()  # the nodes answer in wall-clock seconds
        wall_since = None if since is None else since + shift
        out: dict[int, dict] = {}
        for actor in list(self._actors):
            try:
                busy = self.ray.get(actor.handle.busy.remote(wall_since), timeout=30)
            except Exception:  # noqa: BLE001 - a node gone by the end: no report for it
                continue
            for entry in busy.values():  # one GPU per actor
                entry["intervals"] = [(a - shift, b - shift) for a, b in entry["intervals"]]
                out[actor.index] = entry
        return out

    def baselines(self) -> dict | None:
        """The reference's timings as the first live actor measured them on its GPU (each node
        times the reference once for its own verdicts); kept in the store under that node's
        hardware, so the bench table has them. None on CPU nodes, or when timing failed
        (``baseline_error`` says why)."""
        if self._baselines is not None or not self._actors:
            return self._baselines
        hw = self.hardware
        if hw.device != "cuda":
            return None
        ec = self.config.eval_config
        # the node's worker(s) make each baseline under its wall, once more per one timed out
        walls = ec.baseline_timeout_s
        wait = 3 * (ec.build_timeout_s + ec.test_timeout_s) + walls.eager + walls.compile + \
            walls.autotune + 60
        try:
            stats, why = self.ray.get(self._actors[0].handle.baselines.remote(), timeout=wait)
        except Exception as err:  # noqa: BLE001 - the node was lost meanwhile
            self.baseline_error = f"timing the reference on the Ray node failed: {err}"
            return None
        self.baseline_error = why or ""
        if stats:
            self._baselines = stats
            key = environment_key(hw)
            if self.store is not None and key:
                median = (stats.get("compile") or stats.get("eager") or {}).get("median", -1.0)
                self.store.put_reference_timing(self.task.digest, hw.label, KIND, median, stats,
                                                key)
        return self._baselines

    def close(self) -> None:
        """Stop every actor (each stops its spare workers) and the Ray this run started."""
        ray = self.ray
        actors, self._actors = self._actors, []
        if ray.is_initialized():
            done = [a.handle.close.remote() for a in actors]
            if done:
                ray.wait(done, num_returns=len(done), timeout=30)
            for handle in [a.handle for a in actors] + self._pending:
                try:
                    ray.kill(handle)
                except Exception:  # noqa: BLE001 - already gone with its node
                    pass
        self._pending = []
        if self._started_ray and ray.is_initialized():
            ray.shutdown()

    # -- starting --------------------------------------------------------------------------
    def _start(self) -> TaskProbe:
        ray, rc = self.ray, self.config.ray
        try:
            if not ray.is_initialized():
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
        try:
            files = pack_task(self.task)
        except (OSError, ValueError) as err:
            return self._failed(str(err))
        remote = ray.remote(GpuActor).options(
            num_gpus=1, num_cpus=rc.cpus_per_gpu, max_concurrency=_ACTOR_CONCURRENCY,
            max_restarts=0, max_task_retries=0)  # the engine re-queues; Ray never re-runs
        omp = os.environ.get("OMP_NUM_THREADS")
        handles = [remote.remote(files, self.config, omp) for _ in range(gpus)]
        probes = {h.probe.remote(): h for h in handles}
        ready, late = ray.wait(list(probes), num_returns=len(probes), timeout=rc.start_timeout_s)
        errors: list[str] = []
        for ref in ready:
            try:
                info = ray.get(ref)
            except Exception as err:  # noqa: BLE001 - the actor failed to start (no openkernel?)
                errors.append(f"{type(err).__name__}: {err}".splitlines()[0])
                continue
            if not info.probe.ok:
                errors.append(info.probe.error)
                self._pending.append(probes[ref])  # it holds a GPU: killed at close
                continue
            self._actors.append(_Actor(len(self._actors), probes[ref], info))
        self._pending += [probes[ref] for ref in late]
        if late:
            self.notes.append(f"executor: ray: {len(late)} of {gpus} GPU actors were not "
                              f"placed within {rc.start_timeout_s:g} s; judging on "
                              f"{len(self._actors)}")
        if not self._actors:
            why = errors[0] if errors else (f"no actor was placed within "
                                            f"{rc.start_timeout_s:g} s")
            return self._failed(f"executor: ray: no GPU actor could judge candidates: {why}")
        first = self._actors[0].info
        self._targets, self.plan, self.pch = first.targets, first.plan, first.pch
        nodes = sorted({a.info.node for a in self._actors})
        self.where = (f"executor: ray: {len(self._actors)} GPU actor(s) on {len(nodes)} "
                      f"node(s): {', '.join(nodes)}")
        return first.probe

    def _failed(self, error: str) -> TaskProbe:
        return TaskProbe(ok=False, error=error)

    # -- judging ---------------------------------------------------------------------------
    def _submit(self, request: JudgeRequest, on_phase) -> JudgeReply:
        """Judge on a live actor; re-queue on another while actors are lost under it."""
        requeued: list[str] = []
        while True:
            kept = self._settled.get(request.key)
            if kept is not None:  # this candidate was judged already: its one verdict
                return kept
            actor = self._take()
            try:
                reply = self._stream(actor, request, on_phase)
            except self._lost_errors() as err:
                self._lose(actor, f"{type(err).__name__}")
                requeued.append(f"lost with node {actor.info.node} ({type(err).__name__}); "
                                f"re-queued on another GPU actor")
                continue
            finally:
                self._give(actor)
            if reply.no_device:
                self._lose(actor, reply.no_device)
                requeued.append(f"node {actor.info.node}: {reply.no_device}; re-queued")
                continue
            if reply.error:
                raise RuntimeError(f"on node {actor.info.node}: {reply.error}")
            self._take_notes(actor, reply)
            return self._settle(reply, requeued)

    def _stream(self, actor: _Actor, request: JudgeRequest, on_phase) -> JudgeReply:
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

    def _take(self) -> _Actor:
        """The live actor with the most room (waits while every one is full)."""
        with self._ready:
            while True:
                if not self._actors:
                    raise NoDeviceLeft("executor: ray: every GPU actor is lost (their nodes "
                                       "died or their GPUs failed)")
                # the most room first; among equals, the one that has judged fewest so far
                actor = min(self._actors, key=lambda a: (a.inflight / max(1, a.info.max_workers),
                                                         a.taken))
                if actor.inflight < actor.info.max_workers:
                    actor.inflight += 1
                    actor.taken += 1
                    return actor
                self._ready.wait(timeout=1.0)

    def _give(self, actor: _Actor) -> None:
        with self._ready:
            actor.inflight -= 1
            self._ready.notify_all()

    def _lose(self, actor: _Actor, why: str) -> None:
        with self._ready:
            if actor not in self._actors:
                return
            self._actors.remove(actor)
            self._ready.notify_all()
        self.notes.append(f"executor: ray: GPU actor on node {actor.info.node} lost ({why}); "
                          f"{len(self._actors)} left")
        try:
            self.ray.kill(actor.handle)  # so that it cannot go on judging what was re-queued
        except Exception:  # noqa: BLE001 - gone already
            pass

    def _take_notes(self, actor: _Actor, reply: JudgeReply) -> None:
        with self._ready:
            for note in reply.notes[actor.notes_seen:]:
                self.notes.append(f"node {actor.info.node}: {note}")
            actor.notes_seen = max(actor.notes_seen, len(reply.notes))

    def _lost_errors(self) -> tuple[type[BaseException], ...]:
        ex = self.ray.exceptions
        names = ("RayActorError", "ObjectLostError", "WorkerCrashedError", "NodeDiedError",
                 "ObjectFetchTimedOutError", "LocalRayletDiedError")
        return (_StreamEnded, *(getattr(ex, n) for n in names if hasattr(ex, n)))


class _StreamEnded(Exception):
    """A judge stream ended without its verdict (its actor went away mid-stream)."""


def _key(kind: str, label: str, backend: str, code: str) -> str:
    """A candidate's idempotency key: what it is and where the search put it."""
    digest = hashlib.sha256(f"{kind}\0{backend}\0{code}".encode()).hexdigest()[:20]
    return f"{label}:{digest}"
