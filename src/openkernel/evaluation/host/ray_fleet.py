"""The GPU actors of a run on a Ray cluster: started, handed out, lost and replaced.

A :class:`Fleet` keeps as many actors as it wants: ``ray.gpus``, or, unset, every GPU the
cluster has at the moment (so a GPU node that joins mid-run gets an actor). It asks Ray for an
actor (``num_gpus=1``) whenever fewer are live or being placed; Ray places it once a GPU is
free: a lost node back, another node joining, or the GPU of a killed actor released. A tender
thread, once a second, drops the actors whose node left the cluster, asks for the missing ones
and takes in each placed actor once its probe of the task answers. Every change is a note in
the run's log.

An actor whose probe failed (the task does not load on its node, say) is kept, holding its GPU,
so that Ray does not place its replacement on the same GPU over and over; it is stopped at
close. An actor that could not start at all (openkernel missing on its node) holds nothing:
after three such failures in a row no more are asked for until one starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from openkernel.config import RayConfig
from openkernel.evaluation.host.devices import NoDeviceLeft
from openkernel.evaluation.host.ray_node import ActorInfo
from openkernel.targets import same_arch

TICK_S = 1.0  # how often the tender looks at the cluster
_MAX_FAILED_STARTS = 3  # in a row: then no more actors are asked for until one starts


class Member:
    """The engine's handle on one GPU actor."""

    def __init__(self, index: int, handle, info: ActorInfo):
        self.index, self.handle, self.info = index, handle, info
        self.inflight = 0
        self.taken = 0  # candidates sent to it so far
        self.notes_seen = 0

    def serves(self, arch: str | None) -> bool:
        return arch is None or (self.info.arch is not None and same_arch(arch, self.info.arch))


class Fleet:
    """The live actors, those Ray has yet to place, and the thread that keeps them filled.

    Args:
        ray: The ``ray`` module.
        settings: ``ray`` of the run's configuration (``gpus``, ``start_timeout_s``).
        notes: The evaluator's notes, where each change is said.
    """

    def __init__(self, ray, settings: RayConfig, notes: list[str]):
        self.ray, self.settings, self.notes = ray, settings, notes
        self.live: list[Member] = []
        self._placing: dict = {}  # probe ref -> actor handle, not yet placed or not yet probed
        self._refused: list = []  # placed, but their probe failed: they hold their GPU
        self._failed_starts = 0  # actors in a row that died before their probe answered
        self._make: Callable | None = None  # a new actor handle (set by start)
        self._next_index = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._tender: threading.Thread | None = None

    # -- starting -------------------------------------------------------------------------
    def start(self, make: Callable, count: int) -> list[str]:
        """Ask for ``count`` actors and wait up to ``ray.start_timeout_s`` for them; returns why
        those that failed their probe did. Those still unplaced join when Ray places them."""
        self._make = make
        for _ in range(count):
            self._place()
        refs = list(self._placing)
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=self.settings.start_timeout_s)
        errors = [e for e in (self._admit(ref, quiet=True) for ref in ready) if e]
        self._tender = threading.Thread(target=self._tend_forever, daemon=True, name="ray-fleet")
        self._tender.start()
        return errors

    @property
    def placing(self) -> int:
        """Actors asked for that are not judging yet."""
        return len(self._placing)

    def _want(self) -> int:
        if self.settings.gpus:
            return self.settings.gpus
        return int(self.ray.cluster_resources().get("GPU", 0))

    def _place(self) -> None:
        handle = self._make()
        with self._cond:
            self._placing[handle.probe.remote()] = handle

    def _admit(self, ref, quiet: bool = False) -> str:
        """Take in a placed actor once its probe answered; returns why it cannot judge, if so."""
        with self._cond:
            handle = self._placing.pop(ref)
        try:
            info = self.ray.get(ref)
        except Exception as err:  # noqa: BLE001 - it died starting (no openkernel? node lost?)
            error = f"{type(err).__name__}: {err}".splitlines()[0]
            self._failed_starts += 1  # it holds no GPU: not kept
            if not quiet:
                self.notes.append(f"executor: ray: a new GPU actor did not start: {error}"
                                  + ("; no more are asked for until one starts"
                                     if self._failed_starts == _MAX_FAILED_STARTS else ""))
            return error
        if not info.probe.ok:
            with self._cond:
                self._refused.append(handle)
            if not quiet:
                self.notes.append(f"executor: ray: a new GPU actor could not judge: "
                                  f"{info.probe.error}")
            return info.probe.error
        self._failed_starts = 0
        with self._cond:
            member = Member(self._next_index, handle, info)
            self._next_index += 1
            self.live.append(member)
            self._cond.notify_all()
        if not quiet:
            arch = f" ({info.arch})" if info.arch else ""
            self.notes.append(f"executor: ray: GPU actor started on node {info.node}{arch}; "
                              f"{len(self.live)} judging")
        return ""

    # -- tending --------------------------------------------------------------------------
    def _tend_forever(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tend()
            except Exception:  # noqa: BLE001 - Ray going down at close; the next tick says
                if not self.ray.is_initialized():
                    return

    def tend(self) -> None:
        """One look at the cluster: drop actors whose node left, ask for the missing ones,
        take in those placed."""
        alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
        for member in list(self.live):
            if member.info.node_id and member.info.node_id not in alive:
                self.lose(member, "its node left the cluster")
        self._top_up()
        if self._placing:
            refs = list(self._placing)
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            for ref in ready:
                if not self._stop.is_set():
                    self._admit(ref)

    def _top_up(self) -> None:
        if self._make is None or self._stop.is_set() or \
                self._failed_starts >= _MAX_FAILED_STARTS:
            return
        with self._cond:  # the tender and a candidate's thread (a loss) may both top up
            missing = self._want() - len(self.live) - len(self._placing) - len(self._refused)
            for _ in range(missing):
                self._place()

    # -- handing out ----------------------------------------------------------------------
    def take(self, arch: str | None = None) -> Member:
        """The live actor of ``arch`` (None: any) with the most room; waits while every one is
        full, and while none is live but one is being placed (up to ``ray.start_timeout_s``)."""
        deadline = None
        with self._cond:
            while True:
                pool = [m for m in self.live if m.serves(arch)]
                if not pool:
                    now = time.monotonic()
                    deadline = deadline or now + self.settings.start_timeout_s
                    if not self._placing or now > deadline:
                        what = f"GPU actor of {arch}" if arch else "GPU actor"
                        raise NoDeviceLeft(f"executor: ray: every {what} is lost (their nodes "
                                           "died or their GPUs failed)")
                    self._cond.wait(timeout=TICK_S)
                    continue
                # the most room first; among equals, the one that has judged fewest so far
                member = min(pool, key=lambda m: (m.inflight / max(1, m.info.max_workers),
                                                  m.taken))
                if member.inflight < member.info.max_workers:
                    member.inflight += 1
                    member.taken += 1
                    return member
                self._cond.wait(timeout=TICK_S)

    def give(self, member: Member) -> None:
        with self._cond:
            member.inflight -= 1
            self._cond.notify_all()

    def lose(self, member: Member, why: str) -> None:
        """Drop an actor (once), stop it, and ask for its replacement."""
        with self._cond:
            if member not in self.live:
                return
            self.live.remove(member)
            self._cond.notify_all()
        again = "; another starts when a GPU is free" if self._make is not None else ""
        self.notes.append(f"executor: ray: GPU actor on node {member.info.node} lost ({why}); "
                          f"{len(self.live)} left{again}")
        try:
            self.ray.kill(member.handle)  # so that it cannot go on judging what was re-queued
        except Exception:  # noqa: BLE001 - gone already
            pass
        try:
            self._top_up()
        except Exception:  # noqa: BLE001 - the cluster unreachable now: the tender tries again
            pass

    def close(self) -> None:
        """Stop the tender and every actor (each stops its spare workers)."""
        self._stop.set()
        if self._tender is not None:
            self._tender.join(timeout=10)
        ray = self.ray
        members, self.live = self.live, []
        if not ray.is_initialized():
            return
        done = [m.handle.close.remote() for m in members]
        if done:
            ray.wait(done, num_returns=len(done), timeout=30)
        for handle in [m.handle for m in members] + list(self._placing.values()) + self._refused:
            try:
                ray.kill(handle)
            except Exception:  # noqa: BLE001 - already gone with its node
                pass
        self._placing.clear()
        self._refused.clear()
