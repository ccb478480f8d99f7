"""The critiques table: a round trip through Store, and databases made before the table existed."""

from __future__ import annotations

import sqlite3

from sqlalchemy import create_engine

from kernelcode.dashboard import queries
from kernelcode.dashboard.app import route
from kernelcode.dashboard.source import DataSource
from openkernel.store import Critique, Store, open_readonly

TASK, JOB = "gelu", "old job"


def _tables(path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _old_database(path) -> None:
    """A database as written before critiques were stored: every other table, one job in it."""
    from alembic import command

    from openkernel.store import migrate

    store = Store(path)
    run = store.start_run(task_name=TASK, job_name=JOB, backend="triton")
    store.add_kernel(id="k1", run_id=run.id, task_name=TASK, job_name=JOB, iteration=0, branch=0,
                     label="i0-b0", origin="offline", status="faster", correctness=True,
                     runtime_improvement=1.5)
    store.close()
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:  # the tables migrations began with (no later columns)
        command.downgrade(migrate._config(conn), "0001")
    engine.dispose()
    with sqlite3.connect(path) as conn:  # as an openkernel before critiques and migrations
        conn.execute("DROP TABLE critiques")
        conn.execute("DROP TABLE alembic_version")
        conn.execute("UPDATE runs SET status = 'completed', hardware = 'CPU'")
    assert "critiques" not in _tables(path) and {"runs", "kernels"} <= _tables(path)


def test_critique_round_trip(tmp_path):
    store = Store(tmp_path / "k.sqlite3")
    run = store.start_run(task_name=TASK, job_name="j", backend="triton")
    other = store.start_run(task_name=TASK, job_name="other", backend="triton")
    store.add_critique(run_id=run.id, task_name=TASK, job_name="j", iteration=1, text="second")
    row = store.add_critique(run_id=run.id, task_name=TASK, job_name="j", iteration=0, text="first")
    store.add_critique(run_id=other.id, task_name=TASK, job_name="other", iteration=0, text="elsewhere")
    assert isinstance(row, Critique) and row.id and row.source == "rules" and row.created_at
    rows = store.job_critiques(TASK, "j")
    assert [(r.iteration, r.text) for r in rows] == [(0, "first"), (1, "second")]  # by iteration
    assert all(r.run_id == run.id and r.task_name == TASK and r.job_name == "j" for r in rows)
    store.close()
    reopened = Store(tmp_path / "k.sqlite3")
    assert [r.text for r in reopened.job_critiques(TASK, "j")] == ["first", "second"]
    assert reopened.job_critiques(TASK, "nope") == []
    reopened.close()
    # the dashboard's read path sees the same, newest last
    engine = open_readonly(tmp_path / "k.sqlite3")
    seen = queries.job_critiques(engine, TASK, "j")
    assert [(c["iteration"], c["text"], c["source"]) for c in seen] == [(0, "first", "rules"), (1, "second", "rules")]
    assert [c["text"] for c in queries.job_critiques(engine, TASK, "j", limit=1)] == ["second"]


def test_old_database_reads_as_no_critiques_on_the_dashboard(tmp_path):
    path = tmp_path / "old.sqlite3"
    _old_database(path)
    before = path.read_bytes()
    engine = open_readonly(path)
    assert queries.job_critiques(engine, TASK, JOB) == []
    assert queries.job_signature(engine, TASK, JOB)[0] == 1 and queries.job_signature(engine, TASK, JOB)[2] == 0
    source = DataSource(path)
    data = source.job(TASK, JOB)
    assert data is not None and data.critiques == [] and len(data.rows) == 1
    page = str(route(source, f"/job/{TASK}/old%20job", ""))
    assert "job-graph" in page and "No critic lines stored for this job yet" in page
    assert path.read_bytes() == before and "critiques" not in _tables(path)  # read-only stayed read-only

    # the engine opens it again: the table appears, old rows stay, and the open dashboard sees it
    store = Store(path)
    assert "critiques" in _tables(path)
    assert [k.id for k in store.job_kernels(TASK, JOB)] == ["k1"] and store.job_critiques(TASK, JOB) == []
    store.add_critique(run_id=1, task_name=TASK, job_name=JOB, iteration=0, text="now stored")
    store.close()
    sig = source.signature(TASK, JOB)
    assert sig[2] == 1
    assert [c["text"] for c in source.job(TASK, JOB, sig).critiques] == ["now stored"]
    assert "now stored" in str(route(source, f"/job/{TASK}/old%20job", ""))
