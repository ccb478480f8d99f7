"""Which GPU a worker runs on: one slot per visible GPU, and failed GPUs taken out of rotation.

Slots are indices into the engine's visible devices (``sandbox.worker_env`` maps index i to
the i-th entry of CUDA_VISIBLE_DEVICES), so a run restricted with CUDA_VISIBLE_DEVICES=3,5
uses physical GPUs 3 and 5 as slots 0 and 1. A GPU that fails *as a device* (the driver cannot
initialise it, ECC errors, fallen off the bus) is quarantined and the candidate is re-queued
on another; a candidate that merely crashes its own context (an illegal memory access) is a
candidate fault and leaves the GPU in rotation.
"""

from __future__ import annotations

import re
import threading

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
    """``per_device`` workers on each of ``devices``; blocking acquire, quarantine on faults."""

    def __init__(self, devices: list[int], per_device: int = 1):
        if not devices:
            raise ValueError("a device pool needs at least one device")
        self._cond = threading.Condition()
        self._free: list[int] = [d for _ in range(per_device) for d in devices]
        self.failed: dict[int, str] = {}
        self.devices = list(devices)

    @property
    def healthy(self) -> list[int]:
        return [d for d in self.devices if d not in self.failed]

    def acquire(self, timeout: float | None = None) -> int:
        """The next free healthy device (blocks until one is released)."""
        with self._cond:
            while True:
                if not self.healthy:
                    raise NoDeviceLeft("every GPU failed: " + "; ".join(
                        f"GPU {d}: {why}" for d, why in self.failed.items()))
                for i, dev in enumerate(self._free):
                    if dev not in self.failed:
                        return self._free.pop(i)
                if not self._cond.wait(timeout):
                    raise TimeoutError("no GPU became free")

    def release(self, device: int) -> None:
        with self._cond:
            self._free.append(device)
            self._cond.notify()

    def quarantine(self, device: int, reason: str) -> None:
        """Take ``device`` out of rotation; waiting workers move on to the others."""
        with self._cond:
            self.failed.setdefault(device, reason)
            self._cond.notify_all()
