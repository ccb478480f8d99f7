"""The architecture's boundaries, checked statically with import-linter (contracts in
pyproject.toml): the engine never imports a UI, the confined worker imports nothing of the
engine's side, the engine's side never imports the worker's, generators never import
evaluation."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("lint-imports is not installed (it is in the dev extra)")
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout
