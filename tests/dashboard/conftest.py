"""Fixtures of the dashboard tests: a database written by real engine runs on the CPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import sample_db  # noqa: E402


@pytest.fixture(scope="session")
def sample(tmp_path_factory) -> dict:
    """A database written by real runs (sample_db): an LLM job with every status, an offline
    job run twice, a killed one. ``ids``: the LLM job's kernel ids by status."""
    path = tmp_path_factory.mktemp("dash") / "kernels.sqlite3"
    info = sample_db.build(path)
    ids = {status: [r.id for r in rows] for status, rows in sample_db.by_status(path).items()}
    return {"path": path, "ids": ids, **info}


@pytest.fixture(scope="session")
def job_rows(sample) -> list[dict]:
    """The light rows of the sample job, as the pages read them."""
    from kernelcode.dashboard.source import DataSource

    return DataSource(sample["path"]).job(sample_db.TASK, sample_db.JOB).rows
