"""The machine's Triton launchers: which signatures workers reported, and which are built.

Workers report the signatures of the launchers their Triton made (``worker/launchers.py``);
the engine checks them (type names only), keeps them in ``signatures.json`` of the machine's
folder (every later run on the machine starts from them), and has a ``launchers`` job build
the new ones there, in the background, one job at a time. Every GPU job with a build folder is
handed the folder and copies it into its own Triton cache.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

LIMIT = 256  # signatures kept (the latest); each is one small module in the folder
_TYPE = re.compile(r"(constexpr|nvTmaDesc|\*?k?[a-z][a-z0-9]{0,9})")


def valid(signature) -> bool:
    """A list of Triton type names ("*fp32", "i32", "constexpr"), one level of nesting."""
    def ok(value, depth: int) -> bool:
        if isinstance(value, list):
            return depth < 2 and len(value) <= 64 and all(ok(v, depth + 1) for v in value)
        return isinstance(value, str) and _TYPE.fullmatch(value) is not None

    return isinstance(signature, list) and 0 < len(signature) <= 64 and all(
        ok(v, 1) for v in signature)


class Machine:
    """One folder's signatures (one instance a folder per engine process)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.lock = threading.Lock()
        self.known: list[list] = []
        self.built: set[str] = set()  # json of the signatures a job of this process built
        self.building = False
        self.started = False  # this process built the utilities once (the first job)
        self.broken = ""  # why the job cannot build here (then each worker builds its own)
        try:
            data = json.loads((folder / "signatures.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = []
        self.known = [s for s in data if valid(s)][-LIMIT:] if isinstance(data, list) else []

    def report(self, signatures) -> bool:
        """Add the valid new ones; whether any was new."""
        if not isinstance(signatures, list):
            return False
        with self.lock:
            new = [s for s in signatures[:LIMIT] if valid(s) and s not in self.known]
            if not new:
                return False
            self.known = (self.known + new)[-LIMIT:]
            self._save()
            return True

    def pending(self) -> list[list]:
        with self.lock:
            return [s for s in self.known if json.dumps(s) not in self.built]

    def done(self, built: list) -> None:
        with self.lock:
            self.built.update(json.dumps(s) for s in built)

    def _save(self) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f"signatures.json.{os.getpid()}"
            tmp.write_text(json.dumps(self.known), encoding="utf-8")
            os.replace(tmp, self.folder / "signatures.json")
        except OSError:  # a read-only cache folder: kept in memory for this process
            pass


_MACHINES: dict[Path, Machine] = {}
_LOCK = threading.Lock()


def machine(folder: Path) -> Machine:
    with _LOCK:
        if folder not in _MACHINES:
            _MACHINES[folder] = Machine(folder)
        return _MACHINES[folder]
