"""The architecture's boundaries, checked statically with import-linter (contracts in
pyproject.toml): the engine never imports a UI, the confined worker imports nothing of the
engine's side, the engine's side never imports the worker's, generators never import
evaluation; and every parse of Python source takes one lock."""

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


def test_every_parse_takes_the_one_lock():
    """CPython 3.11's AST constructor is not thread-safe (python/cpython#106905): the engine's
    threads once failed a candidate with "AST constructor recursion depth mismatch". Every
    parse goes through ``openkernel.syntax.parse``, which takes one lock."""
    src = ROOT / "src"
    direct = [f"{p.relative_to(src)}:{n}" for p in sorted(src.rglob("*.py"))
              if p.name != "syntax.py"
              for n, line in enumerate(p.read_text().splitlines(), 1)
              if "ast.parse(" in line and not line.lstrip().startswith("#")]
    assert direct == [], "parse through openkernel.syntax.parse: " + ", ".join(direct)
