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


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
