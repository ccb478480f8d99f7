"""The engine when the model's service fails, against a real OpenAI-compatible server on
127.0.0.1: a revoked key then a dead server stop `openkernel run` with the reason and exit 2
within the configured failures, and the key the 401 echoed is nowhere (database, traces,
terminal output, logs); an ensemble drops the model that fails and goes on; a budget is passed
by no more than the calls in flight when it was reached, its true total is stored, and a
resumed job whose budget is spent sends no call. The models answer with code that does not
parse (a compile error, nothing to build), so no candidate needs a worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

import openkernel
from openkernel import events as ev
from openkernel.costs import format_usd
from openkernel.store import Run, Store

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer, Dead, Fail, critic_json, is_critic  # noqa: E402
from test_llm_feedback import SYNTAX  # noqa: E402

pytestmark = pytest.mark.slow  # engine runs (one through the CLI): ~5-35 s each

KEY = "zz-revoked-key-0a1b2c3d4e5f"  # in a variable whose name says nothing of a key


def _files_text(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file())


def test_a_revoked_key_then_a_dead_server_stop_the_run_and_the_key_is_nowhere(tmp_path,
                                                                             examples_dir):
    with ChatServer(default=SYNTAX) as server:
        server.script = [Fail(401, "Incorrect API key provided: {key}. You can find your key "
                              "at https://example.com"), Dead()]
        inference = json.dumps([{"model": "openai/model-a", "api_base": server.url,
                                 "api_key_env": "OK_LLM_VAR", "num_retries": 0,
                                 "max_consecutive_failures": 3}])
        r = subprocess.run(
            [sys.executable, "-m", "openkernel.cli", "run", str(examples_dir / "gelu"),
             "--set", f"inference={inference}", "--set", "max_iters=8",
             "--set", "branches_per_iteration=1", "--set", "job_name=outage",
             "--set", "traces.enabled=true", "--set", f"traces.dir={tmp_path / 'traces'}",
             "--set", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
             "--set", f"paths.scratch_dir={tmp_path / 'scratch'}"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
            env={**os.environ, "OK_LLM_VAR": KEY})
        assert KEY in server.requests[0]["_auth"]  # the server had the key, and echoed it
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    assert "Traceback" not in out
    assert "3 consecutive calls failed (last: connection failed: " in r.stderr
    assert "HTTP 500" not in out  # no answer came: no status is made up
    assert len(server.requests) == 2  # the 401, the request the server died on; then refused
    store = Store(tmp_path / "k.sqlite3")
    rows = [k for k in store.job_kernels("gelu", "outage") if not k.is_program0]
    assert [k.label for k in rows] == ["i0-b0", "i1-b0", "i2-b0"]  # then it stopped
    assert all(k.status == "generation_failed" for k in rows)
    assert "HTTP 401" in rows[0].generation_log and "[REDACTED]" in rows[0].generation_log
    assert "connection failed" in rows[2].generation_log and "HTTP" not in rows[2].generation_log
    [run] = store.job_runs("gelu", "outage")
    assert run.status == "failed" and "3 consecutive calls failed" in run.error
    store.close()
    assert (tmp_path / "traces").is_dir()
    for where, text in (("terminal", out.encode()), ("files", _files_text(tmp_path))):
        assert KEY.encode() not in text, where  # database, WAL, traces, worker logs


def _overrides(tmp_path, inference: list[dict], *extra: str) -> list[str]:
    return [f"inference={json.dumps(inference)}", "eval_config.max_workers=1", "search.seed=3",
            f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}", *extra]


def test_an_ensemble_drops_the_failing_model_and_goes_on(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")

    def answer(body):
        if body["model"] == "bad":
            return Fail(500, "the bad model is down")
        return critic_json(body) if is_critic(body) else SYNTAX

    with ChatServer(default=answer) as server:
        models = [{"model": "openai/good", "api_base": server.url, "api_key_env": "OK_TEST_KEY"},
                  {"model": "openai/bad", "api_base": server.url, "api_key_env": "OK_TEST_KEY",
                   "weight": 1000, "num_retries": 0, "max_consecutive_failures": 1}]
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
            tmp_path, models, "max_iters=3", "branches_per_iteration=1", "job_name=ens")))
    assert events[-1].reason == "completed", events[-1].error
    assert [r["model"] for r in server.generation_requests()] == ["bad", "good", "good"]
    warnings = [e.message for e in events if isinstance(e, ev.LogEmitted) and e.level == "warning"]
    assert any(w.startswith("openai/bad: 1 consecutive calls failed") and
               w.endswith("the ensemble goes on with openai/good") for w in warnings)
    rows = {k.label: k for k in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "ens")}
    assert rows["i0-b0"].status == "generation_failed" and rows["i0-b0"].model == "openai/bad"
    assert [rows[x].status for x in ("i1-b0", "i2-b0")] == ["compile_error"] * 2


def test_a_budget_is_passed_by_no_more_than_the_calls_in_flight(tmp_path, examples_dir,
                                                                monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    price = {"input_usd_per_mtok": 10.0, "output_usd_per_mtok": 30.0}

    def answer(body):
        return critic_json(body) if is_critic(body) else SYNTAX

    with ChatServer(default=answer) as server:
        models = [{"model": "openai/priced", "api_base": server.url, "api_key_env": "OK_TEST_KEY",
                   "price": price}]
        overrides = _overrides(tmp_path, models, "max_iters=5", "branches_per_iteration=2",
                               "job_name=budget", "budget.max_usd=0.05")
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=overrides))
    finished = events[-1]
    assert finished.reason == "stopped" and finished.stopped_by == "budget"
    store = Store(tmp_path / "k.sqlite3")
    calls = store.job_llm_calls("gelu", "budget")
    total = sum(c.cost_usd for c in calls)
    dearest = max(c.cost_usd for c in calls)
    # once a call's price is known, none starts that could pass the cap with those in flight
    assert total - 0.05 < dearest and len(calls) >= 3
    with store.session() as s:
        run = s.scalars(select(Run)).one()
    assert run.status == "stopped" and run.error == finished.error
    assert f"{format_usd(total)} spent of $0.05" in run.error  # the true total, all calls in
    assert finished.spend.calls == len(calls) == len(server.requests)
    # resumed with the same budget: no call at all, not even the one-token check
    with ChatServer(default=answer) as again:
        models[0]["api_base"] = again.url
        resumed = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
            tmp_path, models, "max_iters=5", "branches_per_iteration=2", "job_name=budget",
            "budget.max_usd=0.05")))
    assert resumed[-1].reason == "stopped" and again.requests == [] and again.pings == []
