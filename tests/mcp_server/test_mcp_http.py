"""``openkernel mcp --http PORT`` on 127.0.0.1: a search started, a kernel submitted into it
while it runs (found in the database with its parent and author), polled to the end, its best
read; then a kernel refused by the finished job, and a few bad inputs as tool errors."""

from __future__ import annotations

import json
import time

import pytest

from openkernel.store import Store

from .conftest import CANDIDATES, FAST, wait_for

pytestmark = pytest.mark.slow

JOB = "agent-job"


def _kernels(session, task: str, job: str) -> list[dict]:
    result = session.read_resource(f"openkernel://jobs/{task}/{job}/kernels")
    return json.loads(result.contents[0].text)["kernels"]


def test_search_with_a_submitted_kernel_then_the_finished_job_refuses_one(http_server):
    session, db, log = http_server
    assert f"database {db} (from OPENKERNEL_DB)" in log.read_text()  # said on start
    started = session.ok("start_search", task="examples/gelu", job=JOB,
                         config={**FAST, "max_iters": 1, "branches_per_iteration": 1})
    assert (started["job"], started["task"], started["database"]) == (JOB, "gelu", str(db))
    assert "already running" in session.error("start_search", task="examples/gelu", job=JOB)

    # Once the job has its reference, an agent submits a kernel derived from it.
    ref = wait_for(lambda: _reference(session), 300, "the job's reference")
    good = (CANDIDATES / "good_gelu.py").read_text()
    mine = session.ok("submit", job=JOB, code=good, parent=ref[:6], author="agent:pytest",
                      description="an erf GELU by hand")
    assert (mine["label"], mine["author"], mine["origin"]) == ("u1", "agent:pytest", "agent")
    assert mine["parent_id"] == ref and mine["correct"] and mine["database"] == str(db)

    status = wait_for(lambda: _done(session), 300, "the search's end")
    assert status["state"] == "completed" and status["judged"] == 2, status
    assert any(line.startswith("u1 ") and "agent:pytest" in line for line in status["recent"])
    best = session.ok("best_kernel", task="gelu", job=JOB)
    assert best["id"] == status["best_kernel_id"] and best["code"].strip()
    shown = session.ok("show_kernel", kernel=mine["id"][:8])
    assert shown["id"] == mine["id"] and "correct on 1 seed" in shown["eval_log"]
    code = session.read_resource(f"openkernel://kernels/{mine['id']}/code").contents[0].text
    assert code == good
    store = Store(db)
    row = store.get_kernel(mine["id"])
    store.close()
    assert (row.job_name, row.label, row.author, row.parent_id) == (JOB, "u1", "agent:pytest", ref)
    assert row.status == "correct" and row.iteration == 0

    # The job is over: a kernel sent now is refused with one message, and nothing is stored.
    edited = good.replace("BLOCK=4096)", "BLOCK=2048)")
    late = session.error("submit", job=JOB, code=edited, parent=mine["id"], author="user")
    assert f"job {JOB} is completed: a kernel joins a running job only" in late
    labels = {k["label"] for k in _kernels(session, "gelu", JOB)}
    assert labels == {"ref", "i0-b0", "u1"}
    runs = session.ok("list_runs", search="agent")["jobs"]
    assert [(r["job"], r["state"], r["candidates"]) for r in runs] == [(JOB, "completed", 2)]

    # Bad input, while the server keeps serving: nothing more is stored.
    assert "no kernel with id or prefix 'zzzz'" in session.error("submit", job=JOB, code=good,
                                                               parent="zzzz")
    assert "does not parse" in session.error("submit", job=JOB, code="class ModelNew(:")
    assert "not running in this server" in session.error("stop_search", job=JOB)
    assert "no job 'nope' in" in session.error("submit", job="nope", code=good)
    assert len(_kernels(session, "gelu", JOB)) == 3


def _reference(session) -> str | None:
    status = session.ok("search_status", job=JOB)
    if status["state"] not in ("starting", "running"):
        raise AssertionError(f"the search ended early: {status}")
    try:
        kernels = _kernels(session, "gelu", JOB)
    except Exception:  # noqa: BLE001 - no kernel stored yet
        return None
    return next((k["id"] for k in kernels if k["label"] == "ref"), None)


def _done(session) -> dict | None:
    status = session.ok("search_status", job=JOB)
    time.sleep(0.5)
    return status if status["state"] not in ("starting", "running") else None
