"""Queries, routing, the CLI and the background server against a real (small) database."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import sample_db

from kernelcode.dashboard import job_url, queries, serve_in_background
from kernelcode.dashboard.app import route
from kernelcode.dashboard.cli import main
from kernelcode.dashboard.source import DataSource
from openkernel.store import open_readonly

ROOT = Path(__file__).resolve().parents[2]


def test_list_jobs_counts_mix_best_and_search(sample):
    """The listing counts candidates (never the reference) and says the run's own best."""
    engine = open_readonly(sample["path"])
    rows, total = queries.list_jobs(engine)
    assert total == 3
    jobs = {r["job_name"]: r for r in rows}
    llm = jobs[sample_db.JOB]
    stored = sample_db.by_status(sample["path"])
    assert llm["candidates"] == sample_db.ITERS * sample_db.BRANCHES == sum(
        len(v) for v in stored.values()) - 1
    assert llm["best_id"] == sample["best"] and llm["best_speedup"] == sample["best_speedup"]
    assert llm["best_speedup"] != 1.0 and llm["status"]["correct"] == len(stored["correct"]) - 1
    for status in ("incorrect", "build_timeout", "test_timeout", "compile_error", "not_run",
                   "generation_failed"):
        assert llm["status"][status] == len(stored[status]), status
    assert llm["hardware"] == "CPU (Triton interpreter)" and llm["state"] == "completed"
    assert jobs[sample_db.OFFLINE_JOB]["runs"] == 2 and jobs[sample_db.OFFLINE_JOB]["state"] == "completed"
    assert jobs[sample_db.KILLED_JOB]["state"] == "interrupted"  # its engine was killed
    assert [r["job_name"] for r in queries.list_jobs(engine, "LLM")[0]] == [sample_db.JOB]
    assert queries.list_jobs(engine, "no_such_%_job") == ([], 0)
    assert len(queries.list_jobs(engine, offset=1, limit=1)[0]) == 1


def test_job_rows_are_light_and_hold_what_the_engine_wrote(sample):
    engine = open_readonly(sample["path"])
    rows = queries.job_kernels(engine, sample_db.TASK, sample_db.JOB)
    n = sample_db.ITERS * sample_db.BRANCHES + 1
    assert len(rows) == n and "prompt" not in rows[0] and "code" not in rows[0]
    best = next(r for r in rows if r["id"] == sample["best"])
    assert set(best["features"]) == {"kind", "launches", "tile", "warps"}  # the archive's cells
    assert best["profiler_data"]["estimate"] and best["profiler_data"]["arithmetic_intensity"] > 0
    assert queries.job_signature(engine, sample_db.TASK, sample_db.JOB)[0] == n
    violation = [queries.kernel_detail(engine, i) for i in sample["ids"]["incorrect"]]
    assert [d["meta"].get("integrity_violation") for d in violation].count("inputs_modified") == 1
    assert all("PROMPT-MARKER" in d["prompt"] for d in violation)
    assert queries.kernel_detail(engine, "nope") is None
    runs = queries.job_runs(engine, sample_db.TASK, sample_db.KILLED_JOB)
    assert [r["state"] for r in runs] == ["interrupted"] and runs[0]["engine_pid"] == sample["killed_pid"]


def test_a_database_from_before_the_run_liveness_columns_still_reads(sample, tmp_path):
    """An older database (no engine_host/engine_pid/heartbeat_at): the dashboard reads it as it
    is; the engine's Store adds the columns when it opens it."""
    import shutil

    from alembic import command
    from sqlalchemy import create_engine

    from openkernel.store import Store, migrate

    old = tmp_path / "old.sqlite3"
    shutil.copy(sample["path"], old)
    engine = create_engine(f"sqlite:///{old}")
    with engine.begin() as conn:  # the tables migrations began with (no later columns)
        command.downgrade(migrate._config(conn), "0001")
    engine.dispose()
    with sqlite3.connect(old) as conn:
        conn.execute("DROP INDEX ix_kernels_job_candidates")
        for column in ("engine_host", "engine_pid", "heartbeat_at"):
            conn.execute(f"ALTER TABLE runs DROP COLUMN {column}")
        conn.execute("UPDATE runs SET started_at = '2026-11-30 10:00:00.000000'")  # old runs
        conn.execute("DROP TABLE alembic_version")  # nor had it migrations
    rows, total = queries.list_jobs(open_readonly(old))
    jobs = {r["job_name"]: r for r in rows}
    assert total == 3 and jobs[sample_db.JOB]["best_id"] == sample["best"]
    assert jobs[sample_db.KILLED_JOB]["state"] == "interrupted"  # "running", silent for a day
    assert DataSource(old).job(sample_db.TASK, sample_db.JOB).state == "completed"
    Store(old).close()
    with sqlite3.connect(old) as conn:
        columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(kernels)")}
    assert {"engine_host", "engine_pid", "heartbeat_at"} <= columns
    assert "ix_kernels_job_candidates" in indexes


def test_routes_give_clear_pages_for_bad_input(sample, tmp_path):
    src = DataSource(sample["path"])
    assert route(src, "/job/x/y", "").id == "message-page"
    assert "Unknown job" in str(route(src, "/job/x/y", ""))
    assert "Unknown kernel" in str(route(src, "/kernel/nope", ""))
    assert "Page not found" in str(route(src, "/a/b/c/d", ""))
    assert "job-graph" in str(route(src, f"/job/{sample_db.TASK}/llm%20job", ""))
    kernel_page = str(route(src, f"/kernel/{sample['best']}", ""))
    assert "PROMPT-MARKER" in kernel_page and "kernel-runtime" in kernel_page
    missing = route(DataSource(tmp_path / "none.sqlite3"), "/", "")
    assert "Cannot open the results database" in str(missing) and "no such database" in str(missing)


def test_cli_exits_2_without_traceback_on_missing_or_foreign_db(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "missing.sqlite3")]) == 2
    err = capsys.readouterr().err
    assert "no such database" in err and "Traceback" not in err
    foreign = tmp_path / "foreign.sqlite3"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert main(["--db", str(foreign)]) == 2
    assert "not an openkernel database" in capsys.readouterr().err
    text = tmp_path / "text.sqlite3"
    text.write_text("hello")
    assert main(["--db", str(text)]) == 2


def test_start_gui_is_the_same_cli(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "start_gui.py"), "--db", str(tmp_path / "x.db")],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2 and "no such database" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run([sys.executable, str(ROOT / "start_gui.py"), "--help"], capture_output=True, text=True,
                         timeout=60)
    assert "--port" in out.stdout and "8885" in out.stdout and "127.0.0.1" in out.stdout


def test_default_db_is_relative_to_cwd():
    from kernelcode.dashboard.cli import parse_args

    args = parse_args([])
    assert Path(args.db) == Path("runs/kernels.sqlite3") and args.port == 8885 and args.host == "127.0.0.1"


def test_non_loopback_host_warns(sample, capsys, monkeypatch):
    import kernelcode.dashboard.server as server

    class Stop(Exception):
        pass

    def fake(*_a, **_k):
        raise Stop

    monkeypatch.setattr(server, "make_dashboard_server", fake)
    with pytest.raises(Stop):
        main(["--db", str(sample["path"]), "--host", "0.0.0.0"])
    assert "warning" in capsys.readouterr().err


def test_serve_in_background_binds_loopback_and_answers(sample):
    base = serve_in_background(sample["path"])
    assert base.startswith("http://127.0.0.1:") and not base.endswith(":0")
    url = job_url(base, "a/b task", "job 1")
    assert url == base + "/job/a%2Fb%20task/job%201"
    with urllib.request.urlopen(url, timeout=30) as resp:  # every path serves the app shell
        assert resp.status == 200 and b"_dash-config" in resp.read()
    with urllib.request.urlopen(base + "/_dash-layout", timeout=30) as resp:
        assert json.loads(resp.read())["props"]["children"]


def test_the_header_names_a_backend_switch(sample, tmp_path):
    """Issue 58: after `b` switched a job to CUDA C++, the dashboard's header still read
    "backend: triton" (the run's first backend). The offline job's file, its iteration-1
    candidates written for CUDA as `b` makes them."""
    import shutil

    path = tmp_path / "switched.sqlite3"
    shutil.copy(sample["path"], path)
    src = DataSource(path)
    before = str(route(src, f"/job/{sample_db.TASK}/{sample_db.OFFLINE_JOB}", ""))
    assert "backend: triton |" in before
    with sqlite3.connect(path) as conn:
        n = conn.execute("UPDATE kernels SET backend = 'cuda' WHERE job_name = ? AND iteration >= 1 "
                         "AND is_program0 = 0", (sample_db.OFFLINE_JOB,)).rowcount
    assert n >= 1
    after = str(route(DataSource(path), f"/job/{sample_db.TASK}/{sample_db.OFFLINE_JOB}", ""))
    assert "backend: cuda (triton to i0, cuda from i1)" in after
