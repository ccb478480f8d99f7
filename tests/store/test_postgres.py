"""PostgreSQL as the results database, end to end on the CPU (offline generator): two engines
in two processes write their own jobs into one database at once, a third starts from the best
kernel of either, and the CLI reads it; a bad URL or a missing psycopg is one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import openkernel
from openkernel import events as ev
from openkernel.store import Store

ROOT = Path(__file__).resolve().parents[2]
GELU = ROOT / "examples" / "gelu"
JOBS = ("host a", "host b")  # a space: names are quoted through the CLI and the URL
ITERS, BRANCHES = 1, 2  # a job each, overlapping: what the tests need


def _settings(url: str, scratch: Path, job: str, seed: int) -> list[str]:
    return [f"paths.kernels_db_path={url}", f"paths.scratch_dir={scratch}", f"job_name={job}",
            f"max_iters={ITERS}", f"branches_per_iteration={BRANCHES}", f"search.seed={seed}",
            "eval_config.max_workers=1",
            # one combination, one seed: a candidate is one worker, not a sweep and a judge
            "prompt.max_template_combinations=1", "eval_config.correctness_seeds=1"]


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "openkernel.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def two_engines(postgres, tmp_path_factory):
    """Two `openkernel run` processes started together into one new database."""
    url = postgres.new_database("two_engines")
    scratch = tmp_path_factory.mktemp("pg-scratch")
    procs = [subprocess.Popen(
        [sys.executable, "-m", "openkernel.cli", "run", str(GELU),
         *sum((["--set", s] for s in _settings(url, scratch / str(i), job, seed=i + 1)), [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i, job in enumerate(JOBS)]
    outputs = [p.communicate(timeout=400)[0] for p in procs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, out[-3000:]
    return {"url": url, "scratch": scratch}


def test_two_engines_write_their_own_jobs_at_once(two_engines):
    store = Store(two_engines["url"])
    runs = {job: store.job_runs("gelu", job) for job in JOBS}
    kernels = {job: store.job_kernels("gelu", job) for job in JOBS}
    store.close()
    a, b = (runs[job][0] for job in JOBS)
    assert a.id != b.id and a.engine_pid != b.engine_pid
    assert a.started_at < b.finished_at and b.started_at < a.finished_at  # they overlapped
    for job in JOBS:
        [run] = runs[job]
        assert run.status == "completed"
        rows = kernels[job]
        assert sum(r.is_program0 for r in rows) == 1
        assert len(rows) == 1 + ITERS * BRANCHES  # nothing lost
        labels = [r.label for r in rows if not r.is_program0]
        assert len(set(labels)) == len(labels)
        assert {r.run_id for r in rows} == {run.id}
    ids = [r.id for rows in kernels.values() for r in rows]
    assert len(set(ids)) == len(ids)


def test_start_from_best_reads_across_the_engines_jobs(two_engines, tmp_path):
    store = Store(two_engines["url"])
    best = store.best_kernel("gelu")
    assert best is not None and best.job_name in JOBS
    events = list(openkernel.optimize(GELU, store=store, overrides=[
        *_settings(two_engines["url"], tmp_path, "third", seed=3), "max_iters=1",
        "branches_per_iteration=1", "start_from_best=true"]))
    assert isinstance(events[-1], ev.RunFinished) and events[-1].reason == "completed"
    [start] = [k for k in store.job_kernels("gelu", "third") if k.origin == "best"]
    assert start.code == best.code
    store.close()


def test_the_cli_reads_a_postgres_database(two_engines, tmp_path):
    url = two_engines["url"]
    done = _cli("runs", "--db", url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for job in JOBS:
        [line] = [ln for ln in lines if ln.split("\t")[1:2] == [job]]
        assert line.split("\t")[2] == "completed"
    best = Store(url).best_kernel("gelu")
    done = _cli("show", best.id, "--db", url, "--field", "label")
    assert done.returncode == 0 and done.stdout.strip() == best.label, done.stderr
    done = _cli("export", "traces", "--db", url, "--out", str(tmp_path), "--job", JOBS[0])
    assert done.returncode == 0, done.stderr
    assert f"{ITERS * BRANCHES} candidates of 1 jobs" in " ".join(done.stdout.split())


def _one_line_exit_2(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for word in words:
        assert word in done.stderr


def test_an_unreachable_url_is_one_line(postgres, tmp_path):
    # A port nothing listens on (the test server's own, plus one, is never another server's).
    url = f"postgresql://openkernel:secret@127.0.0.1:{postgres.port + 1}/none"
    _one_line_exit_2(_cli("runs", "--db", url), "cannot connect to PostgreSQL",
                     f"127.0.0.1:{postgres.port + 1}/none")
    done = _cli("run", str(GELU), "--set", f"paths.kernels_db_path={url}",
                "--set", f"paths.scratch_dir={tmp_path}")
    _one_line_exit_2(done, "cannot connect to PostgreSQL")
    assert "secret" not in done.stderr
    gui = subprocess.run([sys.executable, "-m", "kernelcode.dashboard.cli", "--db", url],
                         capture_output=True, text=True, timeout=120)
    _one_line_exit_2(gui, "cannot connect to PostgreSQL")


def test_without_psycopg_postgres_says_what_to_install_and_sqlite_still_works(tmp_path):
    code = ("import sys; sys.modules['psycopg'] = None\n"  # as if it were not installed
            "from openkernel.store import Store\n"
            f"Store({str(tmp_path / 'k.sqlite3')!r}).close()\n"
            "from openkernel.cli import main\n"
            "sys.exit(main(['runs', '--db', 'postgresql://me@127.0.0.1/results']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ})
    _one_line_exit_2(done, "postgresql://me@127.0.0.1/results", "pip install 'openkernel[postgres]'")


def test_a_select_only_role_reads_the_jobs_and_writes_nothing(two_engines):
    import psycopg
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    from kernelcode.dashboard.source import DataSource
    from pg_server import SUPERUSER

    with psycopg.connect(two_engines["url"], autocommit=True) as conn:  # as README says
        conn.execute("DROP ROLE IF EXISTS reader")
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader")
    url = two_engines["url"].replace(f"//{SUPERUSER}@", "//reader@")
    source = DataSource(url)
    rows, _ = source.jobs()
    assert set(JOBS) <= {r["job_name"] for r in rows}
    job = source.job("gelu", JOBS[0])
    assert job.state == "completed" and len(job.rows) == 1 + ITERS * BRANCHES
    assert source.kernel(job.best_id)["code"]
    with pytest.raises(DBAPIError, match="read-only transaction"), source.engine().begin() as conn:
        conn.execute(text("DELETE FROM kernels"))
