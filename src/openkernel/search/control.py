"""RunControl: how a UI steers a running search, between candidates, from another thread."""

from __future__ import annotations

import threading


class RunControl:
    """Thread-safe switches the search loop reads between candidates.

    ``pause`` holds the loop before its next candidate starts (candidates already being
    evaluated finish and are stored); ``stop`` ends the run after the candidates in flight;
    ``set_backend`` and ``add_instruction`` take effect from the next iteration on. A control
    made with a ``parent`` (one problem of a suite) pauses and stops with it, and can also be
    stopped alone.
    """

    def __init__(self, parent: RunControl | None = None) -> None:
        self._lock = threading.Lock()
        self._parent = parent
        self._running = parent._running if parent is not None else threading.Event()
        if parent is None:
            self._running.set()
        self._stopped = threading.Event()
        self._backend: str | None = None
        self._instructions: list[str] = []

    # called by the UI ----------------------------------------------------------------------
    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stopped.set()
        self._running.set()  # wake a paused loop so it can see the stop

    def set_backend(self, backend: str) -> None:
        if backend not in ("triton", "cuda"):
            raise ValueError(f"unknown backend {backend!r}: expected triton or cuda")
        with self._lock:
            self._backend = backend

    def add_instruction(self, text: str) -> None:
        text = text.strip()
        if text:
            with self._lock:
                self._instructions.append(text)

    # read by the loop ----------------------------------------------------------------------
    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set() or (self._parent is not None and self._parent.stopped)

    def wait_while_paused(self, poll_s: float = 0.2) -> bool:
        """Block while paused; returns False once stopped."""
        while not self._running.wait(poll_s):
            if self.stopped:
                return False
        return not self.stopped

    def take_backend(self) -> str | None:
        with self._lock:
            backend, self._backend = self._backend, None
        return backend

    def take_instructions(self) -> list[str]:
        with self._lock:
            items, self._instructions = self._instructions, []
        return items
