"""Generated candidate code imported as a module, as the compiler's tests run it."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def load(code: str, folder: Path, name: str):
    """``code`` written to ``folder/<name>.py`` and imported from there (a fresh module: the
    Triton interpreter and tracebacks need a real file)."""
    path = Path(folder) / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Launches:
    """A kernel of the candidate module that counts its launches (and launches it)."""

    def __init__(self, kernel):
        self.kernel, self.count = kernel, 0

    def __getitem__(self, grid):
        self.count += 1
        return self.kernel[grid]
