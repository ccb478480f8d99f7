"""Shared test setup: GPU tests skip without CUDA; litellm never fetches its price map; one
PostgreSQL server for the tests that need one."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Without a GPU, Triton in this process is the interpreter from the first import on: modules
# that import triton early (torch's tracing does) would otherwise fix triton.language's own
# @jit helpers as compiled functions, and a later in-process interpreted kernel fails to call
# them. Workers get the same variable from the engine (evaluation/host/environment.py).
if not _has_cuda():
    os.environ["TRITON_INTERPRET"] = "1"


# Loaded worker-seconds of each xdist group in a full run (`--durations=0`, each file's setup,
# call and teardown summed; the dashboard's include its sample build). Files not listed cost
# little. Refresh after a change that moves a file's cost by a minute.
COST_S = {
    "tests/dashboard": 500, "tests/test_engine_e2e.py": 380, "tests/test_engine_llm.py": 260,
    "tests/test_generators_traced.py": 250, "tests/test_ray_executor.py": 230,
    "tests/test_evaluation_integrity.py": 190, "tests/test_traces.py": 170,
    "tests/test_pipeline.py": 140, "tests/test_templates.py": 110,
    "tests/tui/test_e2e_offline.py": 110, "tests/test_blame.py": 100,
    "tests/test_baselines.py": 170, "tests/test_bench.py": 90, "tests/store/test_postgres.py": 75,
    "tests/test_evaluation_faults.py": 58, "tests/test_generators_offline.py": 55,
    "tests/test_engine_outages.py": 51, "tests/test_inductor_seeds.py": 47,
    "tests/test_inductor_signatures.py": 44, "tests/tui/test_demo.py": 41,
    "tests/tui/test_editing.py": 39, "tests/test_templates_llm.py": 35,
    "tests/mcp_server/test_mcp_stdio.py": 35, "tests/mcp_server/test_mcp_http.py": 29,
    "tests/test_gpu_arch.py": 29, "tests/tui/test_llm_stream.py": 26,
    "tests/tui/test_combinations.py": 26, "tests/test_memory_plan.py": 22,
    "tests/test_stopping.py": 20,
}


def _group(item) -> str:
    """A file is one unit of work (its module fixtures are real runs, made once); the dashboard's
    files are one, so the worker that builds their sample database is the one that reads it
    (no worker waits on the build's lock)."""
    path = item.nodeid.split("::")[0]
    return "tests/dashboard" if path.startswith("tests/dashboard/") else path


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which names each item's group
def pytest_collection_modifyitems(config, items):
    # `make test` deals the groups out in this order (--dist loadgroup --no-loadscope-reorder):
    # costliest first, so the last units dealt are short and no worker idles at the end. The sort
    # is stable: a file's tests keep their order (test_zz_... stays last).
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=lambda item: -COST_S.get(_group(item), 0))
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def interpreter(monkeypatch):
    """Kernels run in this process under the Triton interpreter (on a GPU the file's gpu
    tests run them compiled instead)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("the interpreter's check (on a GPU the gpu tests run the kernels compiled)")
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def postgres():
    """One private PostgreSQL server for the session (tests/pg_server.py); ``.new_database(name)``
    gives a fresh database's URL. Skips only where the server's binaries or psycopg are absent
    (CI installs both: `make postgres`, `.[dev]`)."""
    from pg_server import PostgresServer, find_bin

    bindir = find_bin()
    if bindir is None:
        pytest.skip("needs PostgreSQL's binaries (apt-get install postgresql; `make postgres` does it as root)")
    pytest.importorskip("psycopg", reason="needs psycopg 3 (pip install 'openkernel[postgres]')")
    with PostgresServer(bindir) as server:
        yield server


POINTWISE_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x) * 2: two pointwise ops, the offline generator's fused_pointwise template,
    whose space on the CPU is 3 combinations (one candidate's sweep judges all of them)."""

    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(37, 100)]


def get_init_inputs():
    return []
'''


@pytest.fixture
def pointwise_task(tmp_path) -> Path:
    """A task whose offline space is spent by its first candidate (Triton only): the next
    branch has nothing new, so the job ends early."""
    path = tmp_path / "relu_x2.py"
    path.write_text(POINTWISE_TASK)
    return path


@pytest.fixture(scope="session")
def damaged_db(tmp_path_factory) -> Path:
    """A real run's results database (a small job of the GELU example), damaged (``damage``)."""
    import openkernel

    tmp = tmp_path_factory.mktemp("damaged")
    db = tmp / "kernels.sqlite3"
    for _ in openkernel.optimize(EXAMPLES / "gelu", {
            "max_iters": 1, "branches_per_iteration": 1, "job_name": "small",
            "paths": {"kernels_db_path": str(db), "scratch_dir": str(tmp / "scratch")}}):
        pass
    import sqlite3

    with sqlite3.connect(db) as conn:  # one file, nothing left in the WAL
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    from damaged_file import damage

    bad = damage(db, tmp / "damaged.sqlite3")
    with sqlite3.connect(bad) as conn:
        assert "malformed" in str(pytest.raises(sqlite3.DatabaseError, conn.execute,
                                                "PRAGMA integrity_check").value)
    return bad
