"""The cache of hardware ceilings measured on each device model (engine side; no torch).

Measured once per GPU model by a ``hardware`` worker (``worker/hardware.py``), read and written
here, keyed by device name.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from openkernel.evaluation.protocol import CEILINGS_VERSION as CACHE_VERSION


def cache_path() -> Path:
    root = os.environ.get("OPENKERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "openkernel")
    return Path(root) / "ceilings.json"


def load_all(path: Path | None = None) -> dict:
    """Every cached entry, by device name (read in the engine; no torch needed)."""
    try:
        data = json.loads((path or cache_path()).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and v.get("version") == CACHE_VERSION}


def save(entry: dict, path: Path | None = None) -> None:
    """Add one device's measured entry to the cache (written by the engine)."""
    path = path or cache_path()
    data = load_all(path)
    data[entry["device"]] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache still gives this run its numbers
