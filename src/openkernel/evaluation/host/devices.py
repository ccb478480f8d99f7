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
    builds side by side with the others; its timed phase (tests, benchmark, profile) runs
    inside :meth:`turn`, which one worker per device holds at a time. The time turns are held
    is the device's busy time (:meth:`busy`).
    """

    def __init__(self, devices: list[int], per_device: int = 1):
        if not devices:
            raise ValueError("a device pool needs at least one device")
        self._cond = threading.Condition()
        self.per_device = max(1, per_device)
        self.devices = list(devices)
        self._load = {d: 0 for d in self.devices}
        self._exclusive: set[int] = set()  # devices one worker holds alone (a retry)
        self._waiting_exclusive = 0  # while one waits, no other worker is placed
        self._turns = {d: threading.Lock() for d in self.devices}
        self._busy: dict[int, list[tuple[float, float]]] = {d: [] for d in self.devices}
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
        """The device to oneself: the timed phase of one worker at a time."""
        with self._turns[device]:
            start = time.monotonic()
            try:
                yield
            finally:
                self._busy[device].append((start, time.monotonic()))

    def busy(self, since: float | None = None) -> dict[int, dict]:
        """Per device: seconds held in turns, the number of turns and the intervals."""
        out = {}
        for d in self.devices:
            spans = [(a, b) for a, b in self._busy[d] if since is None or b > since]
            out[d] = {"busy_s": round(sum(b - max(a, since or a) for a, b in spans), 3),
                      "turns": len(spans), "intervals": spans}
        return out
