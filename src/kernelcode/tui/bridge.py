"""The hand-off between the engine's worker thread and the UI thread.

The worker appends events to a thread-safe buffer and posts one ``EventsReady`` message; it
posts another only after the UI has drained the buffer. So however fast the engine is, the
app's queue holds at most one of these messages, and the UI takes events in batches (one
batch per turn of its loop), which keeps key presses answered under a fast stream.

Streamed pieces of answers (``AnswerStreamed``, many a second per branch) coalesce in the
buffer: a piece joins the waiting piece of the same answer, so however far the UI falls
behind, the buffer holds at most one per branch and the chat redraws once per batch.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from textual.message import Message

from kernelcode.tui.state import RunCouldNotStart, RunCrashed
from openkernel.errors import OpenKernelError
from openkernel.events import AnswerStreamed


class EventsReady(Message):
    """Events are waiting in the buffer; a newer notice replaces a queued one."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, EventsReady)


class EventBuffer:
    """A lock-protected queue of events with at most one wake-up in flight."""

    def __init__(self, wake: Callable[[], None]) -> None:
        """Args:
            wake: Called (from any thread) when the UI should come and drain.
        """
        self._wake = wake
        self._events: deque[object] = deque()
        self._lock = threading.Lock()
        self._signalled = False

    def put(self, event: object) -> None:
        """Queue one event; wakes the UI only if no wake-up is pending."""
        with self._lock:
            if not (isinstance(event, AnswerStreamed) and self._join(event)):
                self._events.append(event)
            wake, self._signalled = not self._signalled, True
        if wake:
            self._wake()

    def _join(self, piece: AnswerStreamed) -> bool:
        """Add ``piece`` to a waiting piece of the same answer; True if it was.

        Only the run of stream pieces at the end of the queue is searched (a piece never
        jumps over another kind of event), which holds at most one piece per branch.
        """
        for i in range(len(self._events) - 1, -1, -1):
            waiting = self._events[i]
            if not isinstance(waiting, AnswerStreamed):
                return False
            if waiting.label == piece.label and waiting.attempt == piece.attempt:
                self._events[i] = dataclasses.replace(waiting, delta=waiting.delta + piece.delta)
                return True
        return False

    def drain(self, limit: int) -> list[object]:
        """Take up to ``limit`` events; wakes the UI again when more are left."""
        with self._lock:
            n = min(limit, len(self._events))
            batch = [self._events.popleft() for _ in range(n)]
            more = bool(self._events)
            self._signalled = more
        if more:
            self._wake()  # go to the back of the queue so keys pressed meanwhile come first
        return batch


def pump(events: Callable[[], Iterable[object]], buffer: EventBuffer) -> None:
    """Run ``events()`` to the end, feeding the buffer; turns failures into events.

    Called in the worker thread. An ``OpenKernelError`` is bad input: its message alone. Any
    other exception is a bug: its traceback goes with it.
    """
    import traceback

    started = False
    try:
        iterator: Iterator[object] = iter(events())
        for event in iterator:
            started = started or type(event).__name__ == "RunStarted"
            buffer.put(event)
    except OpenKernelError as err:
        # Before the first event it is the task or config; later, the run failed on input.
        buffer.put(RunCrashed(str(err)) if started else RunCouldNotStart(str(err)))
    except Exception as err:  # noqa: BLE001 - shown in the app rather than lost in a thread
        buffer.put(RunCrashed(f"{type(err).__name__}: {err}", traceback.format_exc()))
