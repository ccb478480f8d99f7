"""Fixtures of the dashboard tests: a small realistic database, written by the engine's Store."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import sample_db  # noqa: E402


@pytest.fixture(scope="session")
def sample(tmp_path_factory) -> dict:
    """A database with one job of ten kernels (every status, parents, one best) and an empty job."""
    path = tmp_path_factory.mktemp("dash") / "kernels.sqlite3"
    info = sample_db.build(path)
    return {"path": path, **info}


@pytest.fixture(scope="session")
def job_rows(sample) -> list[dict]:
    """The light rows of the sample job, as the pages read them."""
    from kernelcode.dashboard.source import DataSource

    return DataSource(sample["path"]).job(sample_db.TASK, sample_db.JOB).rows
