"""Whether a run's engine is still there, so a killed job never reads "running" forever.

The engine records its host and pid in its ``runs`` row and refreshes ``heartbeat_at`` every
``HEARTBEAT_S`` from a thread of its own (:class:`Heartbeat`), whatever the search is doing. A
reader decides with :func:`run_state`: a row still "running" is interrupted when its engine ran
on this host and that process is gone (at once), or when its heartbeat is older than
``STALE_S`` (an engine on another host, or a pid reused since).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

HEARTBEAT_S = 5.0
STALE_S = 30.0  # six missed beats: a loaded machine delays a beat by seconds, never by this


def this_host() -> str:
    return socket.gethostname()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host and is not a zombie (killed, not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _utc(moment: datetime) -> datetime:
    # SQLite hands back naive datetimes; the store writes UTC only.
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def stale_before(now: datetime | None = None) -> datetime:
    """Heartbeats older than this are stale (naive UTC, to compare with SQLite's values)."""
    now = now or datetime.now(timezone.utc)
    return (now - timedelta(seconds=STALE_S)).replace(tzinfo=None)


def run_state(status: str | None, host: str | None, pid: int | None,
              heartbeat_at: datetime | None, started_at: datetime | None,
              now: datetime | None = None) -> str:
    """The run's state as it is now: its stored status, or "interrupted" for a "running" row
    whose engine is gone."""
    if status != "running":
        return status or "unknown"
    if host and pid and host == this_host() and not pid_alive(pid):
        return "interrupted"
    last = heartbeat_at or started_at
    now = now or datetime.now(timezone.utc)
    if last is None or now - _utc(last) > timedelta(seconds=STALE_S):
        return "interrupted"
    return "running"


class Heartbeat:
    """Calls ``beat`` every ``interval`` seconds in a daemon thread until :meth:`stop`."""

    def __init__(self, beat: Callable[[], None], interval: float = HEARTBEAT_S) -> None:
        self._beat, self._interval = beat, interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="heartbeat")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval):
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - a busy database skips a beat; the next one counts
                pass

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=self._interval + 5)
