"""RunControl: how a UI steers a running search, between candidates, from another thread."""

from __future__ import annotations

import threading
from typing import Callable

from openkernel.errors import OpenKernelError
from openkernel.search.external import Submission


class RunControl:
    """Thread-safe switches the search loop reads between candidates.

    ``pause`` holds the loop before its next candidate starts (candidates already being
    evaluated finish and are stored); ``stop`` ends the run after the candidates in flight;
    ``set_backend`` and ``add_instruction`` take effect from the next iteration on; ``submit``
    queues a kernel from outside the generator, judged as soon as a worker is free. A control
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
        # Set by the search once the task is probed: why a backend cannot be used, or None.
        self.backend_check: Callable[[str], str | None] | None = None
        self._submissions: list[Submission] = []
        self._closed = ""  # why submissions are refused now (the run ended)

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

    def submit(self, submission: Submission) -> Submission:
        """Queue a kernel from a person or an agent into the run; ``submission.result()``
        waits for it to be judged and stored.

        Raises:
            OpenKernelError: the run is over (or stopping): nothing was queued.
        """
        with self._lock:
            why = self._closed or ("the run is stopping" if self.stopped else "")
            if why:
                raise OpenKernelError(f"{why}: the kernel was not submitted")
            self._submissions.append(submission)
        return submission

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

    def take_submissions(self) -> list[Submission]:
        """The kernels queued since the last call (none once stopped: those are refused)."""
        with self._lock:
            items, self._submissions = self._submissions, []
        if self.stopped:
            for item in items:
                item.refuse("the run was stopped before it was judged")
            return []
        return items

    def close(self, why: str, force: bool = False) -> bool:
        """Refuse submissions from now on if none is queued (or ``force``: refuse those too);
        returns whether it closed."""
        with self._lock:
            if self._submissions and not (force or self.stopped):
                return False
            self._closed, items, self._submissions = why, self._submissions, []
        for item in items:
            item.refuse(f"{why} before it was judged")
        return True
