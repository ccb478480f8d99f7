"""Spare workers shared by every evaluator of this process, kept a while after each one closes.

A spare is a worker that has imported torch (and on a GPU made its CUDA context) and waits for
a job it has not been given yet: nothing of any task or candidate has run in it, so the next
evaluator of the same kind can take it. Measured on the H200 (kb22, fresh pass), a problem's
probe waited a median 10.8 s for its worker to start; a suite's next problem, or the next job
of a long-lived process (the MCP server, kernel-code), now finds its workers ready.

An evaluator holds the pools it uses while it is open; when the last holder of a pool closes,
the pool is kept ``keep_s`` seconds (``eval_config.keep_spares_s``), then its workers are
stopped. Everything left is stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import shutil
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from openkernel.evaluation.host.process import WorkerProcess


@dataclass
class _Pool:
    workers: list[WorkerProcess] = field(default_factory=list)
    holders: int = 0
    until: float | None = None  # when nobody holds it: the moment it is emptied
    keep_scratch: bool = False


class SparePool:
    """Pools of started workers by key (what makes two workers interchangeable)."""

    def __init__(self) -> None:
        self._pools: dict[Hashable, _Pool] = {}
        self._lock = threading.Condition()
        self._reaper: threading.Thread | None = None

    def hold(self, key: Hashable, keep_scratch: bool) -> None:
        """An evaluator uses this pool until it calls :meth:`release`."""
        with self._lock:
            pool = self._pools.setdefault(key, _Pool(keep_scratch=keep_scratch))
            pool.holders += 1
            pool.until = None

    def release(self, keys: set, keep_s: float) -> None:
        """An evaluator is done with ``keys``: a pool nobody holds is kept ``keep_s`` seconds."""
        stop = []
        with self._lock:
            for key in keys:
                pool = self._pools.get(key)
                if pool is None:
                    continue
                pool.holders = max(pool.holders - 1, 0)
                if pool.holders:
                    continue
                if keep_s <= 0:
                    stop.append(self._pools.pop(key))
                else:
                    pool.until = time.monotonic() + keep_s
            keys.clear()
            if any(p.until is not None for p in self._pools.values()):
                self._start_reaper()
                self._lock.notify_all()
        for pool in stop:
            _stop(pool)

    def take(self, key: Hashable) -> WorkerProcess | None:
        """The oldest live spare of ``key`` (the likeliest to be ready), or None."""
        with self._lock:
            pool = self._pools.get(key)
            while pool is not None and pool.workers:
                worker = pool.workers.pop(0)
                if worker.alive():
                    return worker
                _discard(worker, pool.keep_scratch)  # it died importing: start anew
        return None

    def fill(self, key: Hashable, want: int, spawn: Callable[[], WorkerProcess]) -> None:
        """Start spares until ``want`` wait in ``key``'s pool (held by the caller)."""
        with self._lock:
            pool = self._pools.get(key)
            if pool is None or not pool.holders:
                return  # released meanwhile: start nothing for nobody
            while len(pool.workers) < want:
                pool.workers.append(spawn())

    def waiting(self, key: Hashable) -> list[WorkerProcess]:
        """The spares waiting in ``key``'s pool (a copy)."""
        with self._lock:
            pool = self._pools.get(key)
            return list(pool.workers) if pool is not None else []

    def stop_all(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            _stop(pool)

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap, daemon=True, name="spare-reaper")
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                due = [k for k, p in self._pools.items() if p.until is not None and p.until <= now]
                stop = [self._pools.pop(k) for k in due]
                later = [p.until for p in self._pools.values() if p.until is not None]
                if not stop and not later:
                    self._reaper = None
                    return
                if not stop:
                    self._lock.wait(min(later) - now)
                    continue
            for pool in stop:
                _stop(pool)


def _discard(worker: WorkerProcess, keep_scratch: bool) -> None:
    worker.kill()
    if not keep_scratch:
        shutil.rmtree(worker.scratch, ignore_errors=True)


def _stop(pool: _Pool) -> None:
    for worker in pool.workers:
        _discard(worker, pool.keep_scratch)
    pool.workers.clear()


SPARES = SparePool()
atexit.register(SPARES.stop_all)
