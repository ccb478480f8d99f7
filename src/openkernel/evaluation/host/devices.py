"""Which GPU a worker runs on: one slot per visible GPU, and failed GPUs taken out of rotation.

Slots are indices into the engine's visible devices (``environment.worker_env`` maps index i to
the i-th entry of CUDA_VISIBLE_DEVICES), so a run restricted with CUDA_VISIBLE_DEVICES=3,5
uses physical GPUs 3 and 5 as slots 0 and 1. A GPU that fails *as a device* (the driver cannot
initialise it, ECC errors, fallen off the bus) is quarantined and the candidate is re-queued
on another; a candidate that merely crashes its own context (an illegal memory access) is a
candidate fault and leaves the GPU in rotation.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager

DEVICE_FAULT = re.compile(
    r"CUDA driver initialization failed|no CUDA-capable device is detected"
    r"|CUDA-capable device\(s\) is/are busy or unavailable|cudaErrorDevicesUnavailable"
    r"|uncorrectable ECC error|GPU has fallen off the bus|cudaErrorNoDevice"
    r"|CUDA error: unknown error|NVML_ERROR_GPU_IS_LOST",
    re.IGNORECASE,
)


class NoDeviceLeft(RuntimeError):
    """Every GPU has been quarantined."""


def is_device_fault(log: str) -> bool:
    """True when a worker's log shows the GPU itself failing, not the candidate."""
    return bool(DEVICE_FAULT.search(log or ""))


class DevicePool:
    """Workers spread over ``devices``, at most ``per_device`` on each; one timed turn per device.

    A worker is placed when it starts (:meth:`acquire`: the least-loaded healthy device) and
    builds side by side with the others; its timed phase (benchmark, profile; also the tests
    unless checks overlap) runs inside :meth:`turn`, which one worker per device holds at a
    time, with no checks beside it. With overlapping checks, a worker's tests run inside
    :meth:`checks`, which up to ``check_slots`` workers hold at once while no one is timing; a
    worker waiting for its turn keeps new checks off the device, so timing is never starved.
    The time the device is held either way is its busy time (:meth:`busy`).
    """

    def __init__(self, devices: list[int], per_device: int = 1, check_slots: int = 1):
        if not devices:
            raise ValueError("a device pool needs at least one device")
        self._cond = threading.Condition()
        self.per_device = max(1, per_device)
        self.devices = list(devices)
        self._load = {d: 0 for d in self.devices}
        self._exclusive: set[int] = set()  # devices one worker holds alone (a retry)
        self._waiting_exclusive = 0  # while one waits, no other worker is placed
        self.check_slots = max(1, check_slots)  # workers in their checks at once, per device
        self._checking = {d: 0 for d in self.devices}
        self._timing: set[int] = set()  # devices a worker holds alone (timing, a profile)
        self._want_turn = {d: 0 for d in self.devices}  # workers waiting for the turn
        self._busy: dict[int, list[tuple[float, float]]] = {d: [] for d in self.devices}
        self._timed: dict[int, list[tuple[float, float]]] = {d: [] for d in self.devices}
        self.failed: dict[int, str] = {}
        self.created = time.monotonic()

    @property
    def healthy(self) -> list[int]:
        return [d for d in self.devices if d not in self.failed]

    def acquire(self, timeout: float | None = None, among: list[int] | None = None,
                exclusive: bool = False) -> int:
        """The least-loaded healthy device with room (blocks until a worker is released);
        ``among`` limits the choice to those devices (e.g. the GPUs of one architecture);
        ``exclusive`` waits for a device with no other worker and keeps others off it until
        released (a candidate retried with the GPU's memory to itself)."""
        with self._cond:
            while True:
                healthy = [d for d in self.healthy if among is None or d in among]
                if not healthy:
                    raise NoDeviceLeft("every GPU failed: " + "; ".join(
                        f"GPU {d}: {why}" for d, why in self.failed.items()
                        if among is None or d in among))
                free = [d for d in healthy if d not in self._exclusive and (
                    self._load[d] == 0 if exclusive else
                    self._load[d] < self.per_device and not self._waiting_exclusive)]
                if free:
                    dev = min(free, key=lambda d: self._load[d])
                    self._load[dev] += 1
                    if exclusive:
                        self._exclusive.add(dev)
                    return dev
                self._waiting_exclusive += exclusive
                try:
                    if not self._cond.wait(timeout):
                        raise TimeoutError("no GPU became free")
                finally:
                    self._waiting_exclusive -= exclusive

    def release(self, device: int) -> None:
        with self._cond:
            self._load[device] = max(0, self._load[device] - 1)
            self._exclusive.discard(device)
            self._cond.notify_all()

    def quarantine(self, device: int, reason: str) -> None:
        """Take ``device`` out of rotation; waiting workers move on to the others."""
        with self._cond:
            self.failed.setdefault(device, reason)
            self._cond.notify_all()

    @contextmanager
    def turn(self, device: int):
        """The device to oneself: the timed phase of one worker at a time, no checks beside."""
        with self._cond:
            self._want_turn[device] += 1
            try:
                self._cond.wait_for(lambda: device not in self._timing
                                    and not self._checking[device])
            finally:
                self._want_turn[device] -= 1
            self._timing.add(device)
        start = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                self._timing.discard(device)
                span = (start, time.monotonic())
                self._busy[device].append(span)
                self._timed[device].append(span)
                self._cond.notify_all()

    @contextmanager
    def checks(self, device: int):
        """A worker's correctness and integrity checks: shared with up to ``check_slots`` others
        on the device, never beside a timed turn (nor ahead of one that waits)."""
        with self._cond:
            self._cond.wait_for(lambda: device not in self._timing and not self._want_turn[device]
                                and self._checking[device] < self.check_slots)
            self._checking[device] += 1
        start = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                self._checking[device] -= 1
                self._busy[device].append((start, time.monotonic()))
                self._cond.notify_all()

    def busy(self, since: float | None = None) -> dict[int, dict]:
        """Per device: seconds it was held (turns and checks, overlaps counted once), the
        number of holds, their intervals, and the timed turns' intervals alone (``timed``:
        checks overlap one another by design, timed turns never overlap anything)."""
        out = {}
        for d in self.devices:
            spans = [(a, b) for a, b in self._busy[d] if since is None or b > since]
            held, end = 0.0, None
            for a, b in sorted((max(a, since or a), b) for a, b in spans):
                if end is None or a > end:
                    held, end = held + (b - a), b
                elif b > end:
                    held, end = held + (b - end), b
            timed = [(a, b) for a, b in self._timed[d] if since is None or b > since]
            out[d] = {"busy_s": round(held, 3), "turns": len(spans), "intervals": spans,
                      "timed": timed}
        return out
