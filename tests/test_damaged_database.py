"""A damaged results database (issue 58): every front end says so in one message naming the
file and the damage, exits 2, and writes nothing into it. The file is a real run's, damaged
here (conftest.damage)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openkernel.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env={**os.environ, "COLUMNS": "200"})


@pytest.mark.parametrize("args", [["runs"], ["archive"], ["db", "info"], ["run", "EXAMPLE"]],
                         ids=["runs", "archive", "db-info", "run"])
def test_each_command_says_the_file_is_damaged_once(damaged_db, examples_dir, tmp_path, args):
    damaged = damaged_db
    before = _digest(damaged)
    args = [str(examples_dir / "gelu") if a == "EXAMPLE" else a for a in args]
    where = (["--set", f"paths.kernels_db_path={damaged}", "--set", "max_iters=1"]
             if args[0] == "run" else ["--db", str(damaged)])
    r = _cli(*args, *where, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert out.count("the database file is damaged") == 1 and str(damaged) in out, out
    assert "malformed" in out or "quick_check" in out or "page" in out.lower(), out
    for raw in ("Traceback", "SELECT", "INSERT", "sqlalche.me", "[parameters"):
        assert raw not in out, out
    assert _digest(damaged) == before  # nothing written into it
