"""Alembic migrations of the results database: an old SQLite database is upgraded in place
and keeps its rows; a new database on SQLite and on PostgreSQL has exactly ``tables.py``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from openkernel.errors import OpenKernelError
from openkernel.store import Store, migrate, open_readonly
from openkernel.store.tables import Base

# Written by openkernel before migrations (main at 03a9c96): one offline job, 3 kernels.
PRE_ALEMBIC = Path(__file__).parent / "data" / "pre_alembic.sql"


def _old_database(path: Path, older: bool = False) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript(PRE_ALEMBIC.read_text(encoding="utf-8"))
        if older:  # as a database from before the LLM critic, templates and heartbeats
            conn.executescript("""
                DROP TABLE critiques; DROP TABLE llm_calls;
                DROP INDEX ix_kernels_job_candidates;
                ALTER TABLE kernels DROP COLUMN template_results;
                ALTER TABLE runs DROP COLUMN heartbeat_at;
                ALTER TABLE runs DROP COLUMN engine_pid;""")
    conn.close()
    return path


def _differences(engine) -> list:
    with engine.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), Base.metadata)


def _revision(engine) -> str | None:
    with engine.connect() as conn:
        return migrate.revision(conn)


@pytest.mark.parametrize("older", [False, True], ids=["pre-alembic", "older"])
def test_an_old_sqlite_database_is_upgraded_in_place(tmp_path, older):
    path = _old_database(tmp_path / "old.sqlite3", older)
    before = open_readonly(path)
    assert "alembic_version" not in inspect(before).get_table_names()
    before.dispose()

    store = Store(path)
    assert _revision(store.engine) == migrate.head()
    assert _differences(store.engine) == []
    kernels = store.job_kernels("gelu", "old job")
    assert len(kernels) == 3 and sum(k.correctness for k in kernels) == 3
    [job] = store.list_jobs()
    assert (job["job_name"], job["state"], job["candidates"]) == ("old job", "completed", 2)
    assert store.best_kernel("gelu").id == "8fc5eb98f673"
    # The engine goes on writing into it: a new run and a kernel with the later columns.
    run = store.start_run(task_name="gelu", job_name="old job", backend="triton")
    store.add_kernel(id="new1", run_id=run.id, task_name="gelu", job_name="old job", iteration=1,
                     branch=0, label="i1-b0", origin="offline", status="correct",
                     template_results={"winner": {}})
    assert store.get_kernel("new1").template_results == {"winner": {}}
    store.close()
    Store(path).close()  # opened again: already at the newest revision, nothing to do


def test_a_new_database_has_the_tables_of_tables_py(tmp_path):
    store = Store(tmp_path / "new.sqlite3")
    assert _revision(store.engine) == migrate.head()
    assert _differences(store.engine) == []
    store.close()


def test_a_database_from_a_newer_openkernel_is_refused(tmp_path):
    path = tmp_path / "k.sqlite3"
    Store(path).close()
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    engine.dispose()
    with pytest.raises(OpenKernelError, match="revision ffff, newer than this openkernel"):
        Store(path)


def test_postgres_gets_the_same_tables(postgres):
    url = postgres.new_database("migrations")
    store = Store(url)
    assert _revision(store.engine) == migrate.head()
    assert _differences(store.engine) == []
    store.close()


def test_the_baseline_downgrades_to_no_tables_and_upgrades_again(tmp_path):
    """Alembic's own round trip: below the baseline nothing of openkernel's is left."""
    from alembic import command

    engine = create_engine(f"sqlite:///{tmp_path / 'k.sqlite3'}")
    migrate.upgrade(engine)
    with engine.begin() as conn:
        command.downgrade(migrate._config(conn), "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    migrate.upgrade(engine)
    assert _differences(engine) == [] and _revision(engine) == migrate.head()


def test_the_author_column_downgrades_and_upgrades_again(tmp_path):
    """0002 (kernels.author) round trip: the rows stay, the column goes and comes back."""
    from alembic import command

    path = tmp_path / "k.sqlite3"
    store = Store(path)
    run = store.start_run(task_name="gelu", job_name="j", backend="triton")
    store.add_kernel(id="u1k", run_id=run.id, task_name="gelu", job_name="j", iteration=0,
                     branch=1, label="u1", origin="agent", author="agent:test", status="correct")
    store.close()
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        command.downgrade(migrate._config(conn), "0001")
    assert "author" not in {c["name"] for c in inspect(engine).get_columns("kernels")}
    migrate.upgrade(engine)
    assert _differences(engine) == [] and _revision(engine) == migrate.head()
    engine.dispose()
    store = Store(path)
    row = store.get_kernel("u1k")
    assert row.label == "u1" and row.author is None  # the value went with the column


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_keyed_reference_timings_go_down_and_up_keeping_the_newest(tmp_path, request, dialect):
    """0003: the baselines' key gains the software's digest; going down keeps each task and
    hardware's newest row, going up again keeps it (under the unknown environment "")."""
    from alembic import command

    if dialect == "sqlite":
        url = f"sqlite:///{tmp_path / 'k.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres").new_database("keyed")
    store = Store(url)
    store.put_reference_timing("d", "hw", "compile", 1.0, {"n": "old"}, "env-a")
    store.put_reference_timing("d", "hw", "compile", 2.0, {"n": "new"}, "env-b")
    assert store.reference_timing("d", "hw", "compile", "env-a").runtime_stats == {"n": "old"}
    engine = store.engine
    with engine.begin() as conn:
        command.downgrade(migrate._config(conn), "0002_kernel_author")
    assert inspect(engine).get_pk_constraint("reference_timings")["constrained_columns"] == [
        "task_digest", "hardware", "kind"]
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT runtime FROM reference_timings")).all()
    assert rows == [(2.0,)]
    migrate.upgrade(engine)
    assert _differences(engine) == []
    assert store.reference_timing("d", "hw", "compile", "").runtime_stats == {"n": "new"}
    store.close()


def test_llm_call_estimates_downgrade_and_upgrade_keeping_the_calls(tmp_path):
    """Revision 0004 (llm_calls.estimated): down to 0003 the column goes, the calls stay; up
    again they read as counted by the server."""
    from alembic import command

    store = Store(tmp_path / "k.sqlite3")
    run = store.start_run(task_name="t", job_name="j", backend="triton")
    store.add_llm_call(run_id=run.id, task_name="t", job_name="j", iteration=0, model="m",
                       purpose="generate", prompt_tokens=5, completion_tokens=7, estimated=True)
    store.close()
    engine = create_engine(f"sqlite:///{tmp_path / 'k.sqlite3'}")
    with engine.begin() as conn:
        command.downgrade(migrate._config(conn), "0003_baseline_keys")
    assert "estimated" not in {c["name"] for c in inspect(engine).get_columns("llm_calls")}
    migrate.upgrade(engine)
    engine.dispose()
    [call] = Store(tmp_path / "k.sqlite3").job_llm_calls("t", "j")
    assert (call.prompt_tokens, call.completion_tokens, call.estimated) == (5, 7, False)


def test_inductor_captures_downgrade_and_upgrade(tmp_path):
    """Revision 0005 (inductor_captures): a stored capture reads back by its whole key; down to
    0004 the table goes, the other tables stay; up again it is there, empty."""
    from alembic import command

    store = Store(tmp_path / "k.sqlite3")
    record = {"format": 2, "captures": [{"code": "x"}], "warnings": []}
    store.put_inductor_captures("d", "hw", "env", False, record)
    assert store.inductor_captures("d", "hw", "env", False) == record
    assert store.inductor_captures("d", "hw", "env", True) is None  # TF32 is part of the key
    store.put_reference_timing("d", "hw", "compile", 1.0, {}, "env")
    store.close()
    engine = create_engine(f"sqlite:///{tmp_path / 'k.sqlite3'}")
    with engine.begin() as conn:
        command.downgrade(migrate._config(conn), "0004_llm_call_estimates")
    assert "inductor_captures" not in inspect(engine).get_table_names()
    migrate.upgrade(engine)
    assert _differences(engine) == []
    engine.dispose()
    store = Store(tmp_path / "k.sqlite3")
    assert store.inductor_captures("d", "hw", "env", False) is None
    assert store.reference_timing("d", "hw", "compile", "env") is not None
    store.close()


def _open_at_once(path: Path, processes: int) -> list[str]:
    """``processes`` engines open one new database at the same moment, each in a process of its
    own (as a CLI run and a reader polling its file do); what each said, "" for no error."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        start = ctx.Manager().Barrier(processes)
        return pool.starmap(_open_store, [(str(path), start)] * processes)


def _open_store(path: str, start) -> str:
    start.wait()
    try:
        Store(path).close()
    except OpenKernelError as err:
        return str(err)
    return ""


def test_engines_opening_one_new_database_at_once_migrate_it_once(tmp_path):
    """A new SQLite file is migrated by whichever engine comes first; the others wait for it and
    find nothing left to do (two engines once both added the same column: "duplicate column")."""
    for attempt in range(3):
        path = tmp_path / f"k{attempt}.sqlite3"
        assert _open_at_once(path, 4) == [""] * 4
        store = Store(path)
        assert _revision(store.engine) == migrate.head()
        assert _differences(store.engine) == []
        store.close()


def test_an_engine_waits_out_a_write_lock_held_past_busy_timeout(tmp_path):
    """Another process holding the new file's write lock longer than SQLite's busy_timeout
    (10 s; a first migration on a loaded machine once did) is waited for, not an error."""
    import sqlite3
    import threading

    path = tmp_path / "k.sqlite3"
    holder = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(11.0, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        store = Store(path)  # each try waits busy_timeout; the second finds the lock free
    finally:
        release.join()
        holder.close()
    assert _revision(store.engine) == migrate.head()
    store.close()
