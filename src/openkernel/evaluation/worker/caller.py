"""Every forward the evaluation makes, made the same way: from one thread of its own.

A candidate that behaves honestly only while it is checked has to tell checked calls from timed
ones, and the first place it looks is its call stack: on the CPU a kernel that skipped its work
when a caller's name looked like a timer (``benchmark``, ``interleaved``, ``time_once``) was
judged 48-52x faster. So no forward runs on the evaluator's own stack. :class:`Caller` keeps one
thread whose only frame is :func:`_serve`; the first call, the correctness seeds, the float64
check, the held-out shapes, the timed calls and the profiled one are all requests to it, and
from inside the forward each looks the same: the same frames, the same line, the same locals
(the model and its arguments), the same kinds of arguments. The reference is called through it
too, so on the CPU, where the wall clock times the calls, both sides pay the same hand-over.

This hides the phase from the stack, not from a process that sets out to read its own memory
(``sys._current_frames()`` shows the evaluator's thread waiting in ``benchmark``): what makes
sniffing pointless is that every timed call is checked as well (``evaluate.py``, the benchmark's
rounds), so a call a candidate takes for unchecked is checked all the same.

State that PyTorch keeps per thread is set in the serving thread: autograd off, the device, and
the dispatch modes a request asks for (``around``: entered there, around the one call).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any, Callable, ContextManager

import torch

STACK_BYTES = 64 << 20  # a forward that recurses deeply (Dynamo, say) has room, as on the main thread


class Caller:
    """Calls ``target(*args)`` on its serving thread and hands back the result (or raises the
    exception the call raised, as if it had been raised here)."""

    def __init__(self, device: str):
        self.device = device
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._replies: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        """The serving thread, started at the first call: after the worker confined itself, so
        that the thread is confined too (Landlock before ABI 8 confines only the threads that
        the confined one starts later)."""
        # the CUDA device is the caller's own (per thread in CUDA): "cuda" names no index
        device = torch.cuda.current_device() if self.device.startswith("cuda") else None
        before = threading.stack_size()
        threading.stack_size(STACK_BYTES)
        try:
            self._thread = threading.Thread(target=_serve, args=(self._requests, self._replies,
                                                                 device),
                                            name="forward", daemon=True)
            self._thread.start()
        finally:
            threading.stack_size(before)

    def __call__(self, target: Callable, args: list | tuple,
                 around: Callable[[], ContextManager] | None = None) -> Any:
        if self._thread is None:
            self._start()
        self._requests.put((target, tuple(args), around))
        ok, value = self._replies.get()
        if ok:
            return value
        raise value

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on the serving thread (the evaluator's own work that must share its
        per-thread state, e.g. a profiler wrapped around a call)."""
        return self(fn, ())

    def close(self) -> None:
        if self._thread is not None:
            self._requests.put(None)


def _serve(requests: queue.SimpleQueue, replies: queue.SimpleQueue, device: int | None) -> None:
    setup: BaseException | None = None
    try:
        torch.set_grad_enabled(False)
        if device is not None:
            torch.cuda.set_device(device)
    except BaseException as err:  # every call then raises it: the caller never waits in vain
        setup = err
    while True:
        request = requests.get()
        if request is None:
            return
        target, args, around = request
        del request
        try:
            if setup is not None:
                raise RuntimeError(f"the forwards' thread could not be set up: {setup!r}")
            with around() if around is not None else contextlib.nullcontext():
                result = target(*args)
            reply = (True, result)
        except BaseException as err:  # the caller re-raises it: SystemExit too is the call's
            reply = (False, err)
        # Nothing of this call stays referenced here: its arguments and output belong to the
        # caller, which frees them (and poisons reference answers) when it is done with them.
        target = args = result = err = None  # noqa: F841
        replies.put(reply)
        reply = None
