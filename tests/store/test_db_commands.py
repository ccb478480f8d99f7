"""`openkernel db copy | upgrade | info` and readers that never write, against a real PostgreSQL
server: a database written before migrations copied into PostgreSQL (migrated first) and back,
verified by counts and digests; a non-empty destination refused unless --append; a copy
interrupted half way and resumed with nothing doubled; `runs`, `show`, `export` and the
dashboard on an empty or older database creating nothing; a wrong password, masked."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import psycopg
import pytest
from alembic import command
from sqlalchemy import create_engine

from openkernel import cli
from openkernel.store import Store, migrate
from openkernel.store.copy import copy_database, table_digest
from openkernel.store.db import open_readonly
from openkernel.store.engines import engine_url
from openkernel.store.tables import Base

# Written by openkernel before migrations (main at 03a9c96): one offline job, 3 kernels.
PRE_ALEMBIC = Path(__file__).parent / "data" / "pre_alembic.sql"


def _old(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.executescript(PRE_ALEMBIC.read_text(encoding="utf-8"))
    conn.close()
    return path


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """The old database, migrated, with a second job and a row in every other table, through
    the store's own writes: text with a NUL (PostgreSQL's text cannot hold it) and a NaN in a
    JSON column (nor can its json)."""
    path = _old(tmp_path_factory.mktemp("full") / "full.sqlite3")
    store = Store(path)
    run = store.start_run(task_name="gelu", job_name="second", backend="triton")
    for i in range(3):
        store.add_kernel(id=f"second{i}", run_id=run.id, task_name="gelu", job_name="second",
                         iteration=0, branch=i, label=f"i0-b{i}", origin="llm",
                         status="correct", correctness=True, runtime=0.5 + i,
                         runtime_stats={"median": 0.5 + i, "cv": math.nan},
                         eval_log=f"line\x00{i}", meta={"by_arch": {"sm_90": {"runtime": 1.0}}})
    store.add_critique(run_id=run.id, task_name="gelu", job_name="second", iteration=0,
                       text="memory bound", kernel_id="second0", label="i0-b0", role="best")
    store.add_llm_call(run_id=run.id, task_name="gelu", job_name="second", iteration=0,
                       kernel_id="second1", label="i0-b1", model="openai/m", purpose="generate",
                       prompt_tokens=10, completion_tokens=20, cost_usd=0.01, price="config")
    store.put_reference_timing("abc", "NVIDIA H200", "compile", 1.5, {"eager": {"median": 2}})
    store.put_inductor_captures("abc", "NVIDIA H200", "env", False,
                                {"format": 2, "captures": [{"code": "def call(args): ..."}]})
    store.add_suite_problem(suite="s", task_name="gelu", job_name="s", position=0,
                            path="/k/gelu.py", task_digest="abc")
    store.finish_run(run.id, "completed")
    store.close()
    return path


def _digests(where) -> dict[str, tuple[int, str]]:
    engine = open_readonly(where)
    try:
        with engine.connect() as conn:
            return {t.name: table_digest(conn, t) for t in Base.metadata.sorted_tables}
    finally:
        engine.dispose()


def _main(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), " ".join(err.split())


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}


def test_copy_migrates_the_source_first_and_goes_both_ways(postgres, tmp_path, full, capsys):
    old = _old(tmp_path / "old.sqlite3")
    url = postgres.new_database("copy_old")
    code, out, _ = _main(capsys, "db", "copy", str(old), url)
    assert code == 0 and "1 run(s) copied, 0 already there" in out, out
    assert "verified: the same rows at both ends" in out
    code, out, _ = _main(capsys, "db", "info", "--db", str(old))
    assert code == 0 and "(this openkernel's newest)" in out  # the source was migrated first
    code, out, _ = _main(capsys, "db", "info", "--db", url)
    assert code == 0 and "PostgreSQL" in out and "rows in kernels: 3" in out, out

    # Every table, SQLite -> PostgreSQL -> SQLite: the same digests at all three.
    there, back = postgres.new_database("copy_full"), tmp_path / "back.sqlite3"
    for src, dst in ((full, there), (there, back)):
        code, out, _ = _main(capsys, "db", "copy", str(src), str(dst), "--batch", "2")
        assert code == 0 and "verified" in out, out
    first, middle, last = _digests(full), _digests(there), _digests(back)
    assert first == middle == last
    assert all(rows for rows, _ in first.values())  # no table left out
    assert first["runs"][0] == 2 and first["kernels"][0] == 6
    back_store = Store(back)
    [copied] = [k for k in back_store.job_kernels("gelu", "second") if k.label == "i0-b1"]
    assert copied.eval_log == "line\ufffd1" and copied.runtime_stats["cv"] is None
    assert copied.meta["by_arch"]["sm_90"]["runtime"] == 1.0
    [call] = back_store.job_llm_calls("gelu", "second")
    assert call.kernel_id == "second1" and call.run_id == copied.run_id  # followed its run
    back_store.close()


def test_a_non_empty_destination_is_refused_unless_append(tmp_path, full, capsys):
    other = tmp_path / "other.sqlite3"
    store = Store(other)
    run = store.start_run(task_name="relu", job_name="mine", backend="triton")
    store.finish_run(run.id, "completed")
    store.close()
    before = other.read_bytes()
    code, _, err = _main(capsys, "db", "copy", str(full), str(other))
    assert code == 2 and "Traceback" not in err
    assert f"{other} is not empty: it holds 1 run(s) and 0 kernel(s), 1 row(s) of them not " \
           f"from {full}; pass --append" in err, err
    assert other.read_bytes() == before  # nothing written
    code, out, _ = _main(capsys, "db", "copy", str(full), str(other), "--append")
    assert code == 0 and "verified: every source row is in the destination" in out, out
    assert _digests(other)["runs"][0] == 3


def test_an_interrupted_copy_resumes_with_nothing_doubled(postgres, full, capsys):
    url = postgres.new_database("copy_resumed")
    lines = []

    def interrupt_after_the_first_run(line: str) -> None:
        lines.append(line)
        if line.startswith("run "):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_database(full, url, batch=2, progress=interrupt_after_the_first_run)
    half = _digests(url)
    assert half["runs"][0] == 1 and half["kernels"][0] == 3  # the first run, whole
    assert half["reference_timings"][0] == 0
    code, out, _ = _main(capsys, "db", "copy", str(full), url)  # the same command again
    assert code == 0 and "1 run(s) copied, 1 already there" in out, out
    assert _digests(url) == _digests(full)  # nothing twice, nothing missing


def test_readers_on_an_empty_database_create_nothing(postgres, tmp_path, capsys):
    from kernelcode.dashboard.cli import main as dashboard

    url = postgres.new_database("empty")
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    for db in (url, str(empty)):
        said = f"no openkernel tables at {db}: run openkernel db upgrade"
        for args in (["runs"], ["show", "abc"], ["export", "traces", "--out", str(tmp_path)],
                     ["export", "sft", "--out", str(tmp_path / "sft.jsonl")]):
            code, _, err = _main(capsys, *args, "--db", db)
            assert code == 2 and err == f"error: {said}", (args, err)
        assert dashboard(["--db", db]) == 2
        assert said in " ".join(capsys.readouterr().err.split())
        code, out, _ = _main(capsys, "db", "info", "--db", db)
        assert code == 0 and "schema: none: no openkernel tables (run openkernel db upgrade)" in out
    assert _tables(url) == set() and empty.stat().st_size == 0  # nothing created
    code, out, _ = _main(capsys, "db", "upgrade", "--db", url)
    assert code == 0 and "upgraded from no revision to" in out
    code, out, _ = _main(capsys, "runs", "--db", url)
    assert code == 0 and out.startswith("task")  # the header alone: no jobs yet


def test_readers_on_an_older_database_migrate_nothing(postgres, tmp_path, capsys):
    url = postgres.new_database("older")
    assert _main(capsys, "db", "copy", str(_old(tmp_path / "old.sqlite3")), url)[0] == 0
    engine = create_engine(engine_url(url))
    with engine.begin() as conn:  # the tables migrations began with (no later columns)
        command.downgrade(migrate._config(conn), "0001")
    engine.dispose()
    with psycopg.connect(url, autocommit=True) as conn:  # as an openkernel before migrations
        conn.execute("DROP TABLE alembic_version; DROP TABLE llm_calls; "
                     "ALTER TABLE kernels DROP COLUMN template_results")
    before = _tables(url)
    code, out, _ = _main(capsys, "runs", "--db", url)
    assert code == 0 and "gelu old job completed 2" in out, out
    code, out, _ = _main(capsys, "show", "8fc5eb98f673", "--db", url, "--field", "label")
    assert code == 0 and out == "i0-b0"
    code, _, err = _main(capsys, "export", "traces", "--db", url, "--out", str(tmp_path / "t"))
    assert code == 2 and "without kernels.author, kernels.template_results," in err
    assert err.rstrip().endswith(": run openkernel db upgrade"), err
    assert _tables(url) == before  # no table made, no migration run
    code, out, _ = _main(capsys, "db", "info", "--db", url)
    assert "none: tables written before migrations (run openkernel db upgrade)" in out
    assert _main(capsys, "db", "upgrade", "--db", url)[0] == 0
    code, out, _ = _main(capsys, "export", "traces", "--db", url, "--out", str(tmp_path / "t"))
    assert code == 0 and "2 candidates of 1 jobs" in out, out


def test_a_wrong_password_is_one_line_and_masked(postgres, tmp_path, capsys):
    url = postgres.password_role("owner", "right-pw").replace("owner@", "owner:wrong-pw@")
    old = _old(tmp_path / "old.sqlite3")
    for args in (["runs", "--db", url], ["db", "info", "--db", url],
                 ["db", "copy", str(old), url]):
        code, _, err = _main(capsys, *args)
        assert code == 2 and "password authentication failed" in err, err
        assert "wrong-pw" not in err and "owner:***@" in err and "\n" not in err.strip()
    assert _digests(old)["kernels"][0] == 3  # the source is whole
