"""Triton's host-side modules, built once per machine instead of once per worker.

Each worker keeps its Triton cache in its candidate's own build folder (no candidate reaches
another's builds), so each one built Triton's driver utilities (``cuda_utils``, with the system
compiler) and, on Triton releases that generate one (3.6 on the H200), a launcher for each
kernel signature: 0.29-0.39 s, then ~0.25 s a signature, before a kernel's first launch
(benchmarks/results/h200_triton_first_launch_2026-12-04.json).

Those modules are Triton's own code, made from a signature's type names. A ``launchers`` job
(our code alone, no candidate: :func:`build`) makes them in the machine's folder for the
signatures workers reported; every GPU job copies that folder into its own cache before the
candidate is imported (:func:`seed`), where Triton's lookup finds them. A worker never writes
the machine's folder once its candidate runs (the sandbox lets it write only its scratch and
its build folder), and what it reports (:class:`Recorder`) is type names that the engine checks.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def _driver():
    """Triton's NVIDIA driver module, or None (no Triton, or no NVIDIA backend)."""
    try:
        from triton.backends.nvidia import driver
    except Exception:  # noqa: BLE001 - any import failure means there is nothing to share
        return None
    return driver


def generates_launchers() -> bool:
    """Whether this Triton builds a launcher per signature (3.6 does; 3.9 has a generic one)."""
    driver = _driver()
    return driver is not None and hasattr(driver, "make_launcher")


def seed(machine: str | Path, own: str | Path) -> int:
    """Copy the machine's modules (one folder per Triton cache key) into this worker's own
    Triton cache, before any candidate code runs; returns how many. Copies, not links: the
    worker may write its own cache, never the machine's files."""
    copied = 0
    try:
        entries = [e for e in os.scandir(machine) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for entry in entries:
        if entry.name.startswith("tmp"):
            continue
        target = Path(own) / entry.name
        if target.exists():
            continue
        try:
            shutil.copytree(entry.path, target, symlinks=True)
        except OSError:  # one being written as we copy: Triton builds it here if it must
            continue
        copied += 1
    return copied


class Recorder:
    """The signatures of the launchers this worker's Triton made (the engine has them built
    for the machine afterwards). Wraps the launcher class's constructor: Triton calls it at a
    kernel's first launch."""

    def __init__(self) -> None:
        self.signatures: list[list] = []

    def install(self) -> "Recorder":
        driver = _driver()
        if driver is None or not hasattr(driver, "make_launcher"):
            return self
        cls = driver.CudaLauncher
        original = cls.__init__
        recorder = self

        def init(launcher, src, metadata, *args, **kwargs):
            if not getattr(metadata, "tensordesc_meta", None):  # plain arguments only
                try:
                    signature = _plain(list(src.signature.values()))
                except Exception:  # noqa: BLE001 - a record we cannot make is not made
                    signature = None
                if signature is not None and signature not in recorder.signatures:
                    recorder.signatures.append(signature)
            return original(launcher, src, metadata, *args, **kwargs)

        init.__wrapped__ = original
        cls.__init__ = init
        return self


def _plain(values: list) -> list:
    """A signature as JSON (tuples, Triton's nested arguments, as lists)."""
    return [_plain(list(v)) if isinstance(v, (tuple, list)) else str(v) for v in values]


def _tuples(values: list) -> list:
    return [tuple(_tuples(v)) if isinstance(v, list) else v for v in values]


# What Triton's launcher constructor reads of a compiled kernel's metadata: a launcher's code
# depends on the signature alone; these only size its scratch at launch time.
_METADATA = dict(tensordesc_meta=None, num_ctas=1, global_scratch_size=0,
                 global_scratch_align=1, profile_scratch_size=0, profile_scratch_align=1,
                 launch_cooperative_grid=False, launch_pdl=False)


def build(machine: str | Path, signatures: list[list]) -> dict[str, Any]:
    """Worker mode ``launchers``: Triton's driver utilities and a launcher for each signature,
    built in ``machine`` (Triton's own cache layout). Our code alone: no candidate is loaded."""
    t0 = time.monotonic()
    driver = _driver()
    if driver is None:
        return {"error": "no Triton with an NVIDIA backend"}
    Path(machine).mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = str(machine)  # Triton reads it at each cache lookup
    try:
        driver.CudaUtils()
    except Exception as err:  # noqa: BLE001 - reported: the workers build their own then
        return {"error": f"Triton's driver utilities: {type(err).__name__}: {err}"[:500],
                "seconds": round(time.monotonic() - t0, 3)}
    built, failed = [], []
    if hasattr(driver, "make_launcher"):
        for signature in signatures:
            names = [f"arg{i}" for i in range(len(signature))]
            src = SimpleNamespace(constants={}, signature=dict(zip(names, _tuples(signature))),
                                  fn=SimpleNamespace(arg_names=names))
            try:
                driver.CudaLauncher(src, SimpleNamespace(**_METADATA))
            except Exception as err:  # noqa: BLE001 - that signature stays the workers' own
                failed.append({"signature": signature, "error": f"{type(err).__name__}: {err}"[:300]})
                continue
            built.append(signature)
    return {"built": built, "failed": failed, "seconds": round(time.monotonic() - t0, 3)}
