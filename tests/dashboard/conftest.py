"""Fixtures of the dashboard tests: a database written by real engine runs on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from filelock import FileLock

sys.path.insert(0, str(Path(__file__).parent))

import sample_db  # noqa: E402


@pytest.fixture(scope="session")
def sample(tmp_path_factory) -> dict:
    """A database written by real runs (sample_db): an LLM job with every status, an offline
    job run twice, a killed one. ``ids``: the LLM job's kernel ids by status.

    The runs take minutes on two cores: the first pytest-xdist worker to need them writes the
    database into the session's shared temporary folder (the pattern of xdist's docs) and every
    worker reads its own copy, so that what one worker's tests add stays its own."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    built = shared / "dash-sample"
    with FileLock(str(shared / "dash-sample.lock")):
        if not (built / "info.json").exists():
            built.mkdir(exist_ok=True)
            info = sample_db.build(built / "kernels.sqlite3")
            (built / "info.json").write_text(json.dumps(
                {k: info[k] for k in ("best", "best_speedup", "killed_pid")}))
    path = tmp_path_factory.mktemp("dash") / "kernels.sqlite3"
    shutil.copyfile(built / "kernels.sqlite3", path)  # checkpointed: the one file holds it all
    ids = {status: [r.id for r in rows] for status, rows in sample_db.by_status(path).items()}
    return {"path": path, "ids": ids, **json.loads((built / "info.json").read_text())}


@pytest.fixture(scope="session")
def job_rows(sample) -> list[dict]:
    """The light rows of the sample job, as the pages read them."""
    from kernelcode.dashboard.source import DataSource

    return DataSource(sample["path"]).job(sample_db.TASK, sample_db.JOB).rows
