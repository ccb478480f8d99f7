"""RunControl: how a UI steers a running search, between candidates, from another thread."""

from __future__ import annotations

import threading
from typing import Callable


class RunControl:
    """Thread-safe switches the search loop reads between candidates.

    ``pause`` holds the loop before its next candidate starts (candidates already being
    evaluated finish and are stored); ``stop`` ends the run after the candidates in flight;
    ``set_backend`` and ``add_instruction`` take effect from the next iteration on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = threading.Event()
        self._running.set()
        self._stopped = threading.Event()
        self._backend: str | None = None
        self._instructions: list[str] = []
        # Set by the search once the task is probed: why a backend cannot be used, or None.
        self.backend_check: Callable[[str], str | None] | None = None

    # called by the UI ----------------------------------------------------------------------
    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stopped.set()
        self._running.set()  # wake a paused loop so it can see the stop

    def set_backend(self, backend: str) -> str | None:
        """Ask for ``backend`` from the next iteration; returns why it is refused (the
        generator cannot write it for this task, decided now, at the key) or None."""
        if backend not in ("triton", "cuda"):
            raise ValueError(f"unknown backend {backend!r}: expected triton or cuda")
        check = self.backend_check
        reason = check(backend) if check is not None else None
        if reason:
            return reason
        with self._lock:
            self._backend = backend
        return None

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
        return self._stopped.is_set()

    def wait_while_paused(self, poll_s: float = 0.2) -> bool:
        """Block while paused; returns False once stopped."""
        while not self._running.wait(poll_s):
            if self._stopped.is_set():
                return False
        return not self._stopped.is_set()

    def take_backend(self) -> str | None:
        with self._lock:
            backend, self._backend = self._backend, None
        return backend

    def take_instructions(self) -> list[str]:
        with self._lock:
            items, self._instructions = self._instructions, []
        return items
