"""Trace capture: Parquet written as the job goes (offline and LLM runs), read back with
pyarrow, pandas and polars; a run killed with SIGKILL keeps what was judged; secrets never
reach a trace; `openkernel export traces` and `openkernel export sft`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import openkernel
from openkernel import events as ev
from openkernel.store import Store
from openkernel.store.traces import COLUMNS, SCHEMA_VERSION, read_dataset

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer, critic_json, is_critic  # noqa: E402
from test_engine_llm import KERNEL  # noqa: E402

SECRET = "sk-test-trace-secret-0123456789"
NAMES = [name for name, *_ in COLUMNS]


def _overrides(tmp: Path, *extra: str) -> list[str]:
    return [f"paths.kernels_db_path={tmp / 'k.sqlite3'}", f"paths.scratch_dir={tmp / 'scratch'}",
            "eval_config.max_workers=1", "search.seed=1", "traces.enabled=true",
            f"traces.dir={tmp / 'traces'}", *extra]


# Offline runs: one combination and one seed, so a gelu candidate is one worker, not a sweep
# and then a judge (no test here asserts on the sweep).
FAST = ("prompt.max_template_combinations=1", "eval_config.correctness_seeds=1")


def _all_text(table) -> str:
    return "\n".join(str(v) for col in table.columns for v in col.to_pylist())


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory, examples_dir):
    """An offline run with traces on; the dataset is read after the first candidate too."""
    tmp = tmp_path_factory.mktemp("offline")
    events, during = [], None
    for event in openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
            tmp, "job_name=traced", "max_iters=2", "branches_per_iteration=2", *FAST)):
        events.append(event)
        if isinstance(event, ev.CandidateEvaluated) and during is None:
            during = read_dataset(tmp / "traces")  # while the job goes
    return tmp, events, during


def test_offline_run_writes_a_row_per_candidate_as_it_goes(offline_run):
    tmp, events, during = offline_run
    assert during.num_rows == 1 and during.column("session_status").to_pylist() == ["running"]
    finished = events[-1]
    assert finished.reason == "completed"
    judged = [e for e in events if isinstance(e, ev.CandidateEvaluated)]
    files = sorted((tmp / "traces").rglob("*.parquet"))
    assert len(files) == len(judged) == 4
    assert not list((tmp / "traces").rglob(".*.tmp"))  # no half-written file left behind
    table = read_dataset(tmp / "traces")
    assert table.column_names == NAMES and table.num_rows == 4
    rows = {r["label"]: r for r in table.to_pylist()}
    assert set(rows) == {e.label for e in judged}
    for e in judged:
        r = rows[e.label]
        assert r["kernel_id"] == e.program.id and r["status"] == e.status.value
        assert r["speedup"] == pytest.approx(e.speedup) and r["kernel_code"] == e.program.code
        assert r["prompt"] and r["response"] and r["eval_log"] and r["intent"]
        assert r["schema_version"] == SCHEMA_VERSION and r["problem"] == "gelu"
        assert r["session_status"] == "completed"  # rewritten when the run ended
        assert r["final_speedup"] == pytest.approx(finished.best_speedup)
        assert r["final_kernel_id"] == finished.best_program_id and r["total_time_seconds"] > 0
        assert r["candidate_model"].startswith("offline") and r["generator"] == "offline"
        assert json.loads(r["runtime_stats"]) == e.program.kernel_exec_result.runtime_stats
    keeps = {e.program.id for e in events if isinstance(e, ev.BestImproved)}
    assert {r["kernel_id"] for r in rows.values() if r["decision"] == "keep"} == keeps
    assert all(r["decision"] in ("keep", "discard", "error") for r in rows.values())
    # the critic's diagnosis that reached iteration 1 is in its rows
    critic = [e for e in events if isinstance(e, ev.CriticDiagnosed)][0]
    assert all(r["critic_diagnosis"] == critic.diagnoses[0].said
               for r in rows.values() if r["iteration"] == 1)
    assert all(r["critic_diagnosis"] == "" for r in rows.values() if r["iteration"] == 0)


def test_the_dataset_reads_the_same_in_pyarrow_pandas_and_polars(offline_run):
    tmp, _, _ = offline_run
    root = tmp / "traces"
    arrow = ds.dataset(str(root), format="parquet").to_table()
    frame = pd.read_parquet(root)
    polars = pl.read_parquet(str(root / "**" / "*.parquet"))
    assert arrow.num_rows == len(frame) == polars.height == 4
    assert list(frame.columns) == NAMES == polars.columns
    assert sorted(frame["kernel_id"]) == sorted(polars["kernel_id"].to_list())
    assert str(frame["evaluated_at"].dtype).startswith("datetime64") and frame["correctness"].dtype == bool
    assert pq.read_schema(next(root.rglob("*.parquet"))).metadata[b"openkernel.trace_schema"] == b"1"


def test_export_traces_writes_the_same_rows_from_the_database(offline_run, tmp_path):
    tmp, events, _ = offline_run
    out = tmp_path / "exported"
    r = _cli("export", "traces", "--db", str(tmp / "k.sqlite3"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "4 candidates of 1 jobs" in r.stdout
    live = {row["kernel_id"]: row for row in read_dataset(tmp / "traces").to_pylist()}
    exported = {row["kernel_id"]: row for row in read_dataset(out).to_pylist()}
    assert exported.keys() == live.keys()
    same = [n for n in NAMES if n != "total_time_seconds"]
    for kid, row in exported.items():
        assert {n: row[n] for n in same} == {n: live[kid][n] for n in same}, kid
    assert list(out.rglob("*.parquet")) == [out / "gelu" / "traced" / "job.parquet"]


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory, examples_dir):
    """A 2x2 LLM run with traces on, against the test server: the key is SECRET, each answer
    is a distinct kernel (judged, none a duplicate) that quotes the key, the critic repeats it,
    and the user instructions carry another service's token from the environment."""
    tmp = tmp_path_factory.mktemp("llm")
    leaky = KERNEL.replace("Idea: one program", f"Idea: (my key is {SECRET}) one program")
    variants = [leaky.replace("BLOCK=4096", f"BLOCK={b}").replace("4096),)", f"{b}),)")
                for b in (4096, 2048, 1024, 512, 256, 128)]

    def answer(body):
        if is_critic(body):
            return critic_json(body, f"leaks {SECRET}")
        return variants.pop(0) if variants else leaky

    with pytest.MonkeyPatch.context() as mp, ChatServer(default=answer) as server:
        mp.setenv("OK_TEST_KEY", SECRET)
        mp.setenv("SOME_SERVICE_TOKEN", "tok-another-secret-value-42")
        inference = json.dumps([{"model": "openai/model-a", "api_base": server.url,
                                 "api_key_env": "OK_TEST_KEY"}])
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=_overrides(
            tmp, f"inference={inference}", "job_name=llm", "max_iters=2",
            "branches_per_iteration=2", "eval_config.correctness_seeds=1",
            "user_instructions=Service token tok-another-secret-value-42 must not leak.")))
    return tmp, events


def test_export_sft_keeps_the_best_correct_model_answers(llm_run, tmp_path):
    db, events = llm_run[0] / "k.sqlite3", llm_run[1]
    assert events[-1].reason == "completed", events[-1].error
    out = tmp_path / "pairs.jsonl"
    r = _cli("export", "sft", "--top", "0.5", "--db", str(db), "--out", str(out))
    assert r.returncode == 0, r.stderr
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    correct = sorted((row for row in Store(db).job_kernels("gelu", "llm")
                      if row.correctness and not row.is_program0),
                     key=lambda row: row.runtime_improvement, reverse=True)
    distinct = list({(row.prompt, row.answer): row for row in correct}.values())
    assert len(pairs) == -(-len(distinct) // 2) >= 1 and f"{len(pairs)} instruction pairs" in r.stdout
    assert [p["speedup"] for p in pairs] == sorted((p["speedup"] for p in pairs), reverse=True)
    assert pairs[0]["speedup"] == pytest.approx(correct[0].runtime_improvement)
    for p in pairs:
        assert p["messages"][0] == {"role": "user", "content": p["prompt"]}
        assert p["messages"][1]["role"] == "assistant" and "class ModelNew" in p["answer"]
        assert p["problem"] == "gelu" and p["model"] == "openai/model-a"
        assert p["slower_than_reference"] == (p["speedup"] < 1.0)
    slower = sum(p["slower_than_reference"] for p in pairs)
    assert (f"{slower} of them slower than the reference" in r.stdout) == (slower > 0)
    # --min-speedup leaves out the kernels slower than that
    cut = distinct[1].runtime_improvement if len(distinct) > 1 else distinct[0].runtime_improvement
    kept = tmp_path / "kept.jsonl"
    r = _cli("export", "sft", "--top", "1", "--min-speedup", str(cut), "--db",
             str(db), "--out", str(kept))
    assert r.returncode == 0, r.stderr
    assert sorted(json.loads(x)["kernel_id"] for x in kept.read_text().splitlines()) == sorted(
        row.id for row in distinct if row.runtime_improvement >= cut)
    # the same from the live trace dataset
    again = tmp_path / "again.jsonl"
    r = _cli("export", "sft", "--top", "0.5", "--traces", str(llm_run[0] / "traces"), "--out",
             str(again))
    assert r.returncode == 0, r.stderr
    assert [json.loads(x)["kernel_id"] for x in again.read_text().splitlines()] == [
        p["kernel_id"] for p in pairs]
    r = _cli("export", "sft", "--top", "0", "--db", str(db), "--out", str(again))
    assert r.returncode == 2 and "--top 0.0" in r.stderr and "Traceback" not in r.stderr


def test_an_llm_run_traces_tokens_and_never_a_secret(llm_run, tmp_path, monkeypatch):
    tmp, events = llm_run
    monkeypatch.setenv("OK_TEST_KEY", SECRET)  # the export below runs where both are set
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-another-secret-value-42")
    assert events[-1].reason == "completed", events[-1].error
    table = read_dataset(tmp / "traces")
    assert table.num_rows == 4
    text = _all_text(table)
    assert SECRET not in text and "tok-another-secret-value-42" not in text
    assert "[REDACTED]" in text and "(my key is [REDACTED])" in table.column("response")[0].as_py()
    for path in (tmp / "traces").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and b"tok-another-secret" not in data
    rows = table.to_pylist()
    spend = events[-1].spend
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in rows)
    assert all(r["tokens_used"] == r["prompt_tokens"] + r["completion_tokens"] for r in rows)
    assert {r["total_tokens"] for r in rows} == {spend.tokens}  # critic calls included
    assert {r["price"] for r in rows} == {"unknown"} and {r["model"] for r in rows} == {"openai/model-a"}
    assert all(r["latency_seconds"] > 0 for r in rows)
    assert any("critic model openai/model-a" in r["critic_diagnosis"] for r in rows)
    frame = pd.read_parquet(tmp / "traces")
    assert frame["prompt_tokens"].sum() == sum(r["prompt_tokens"] for r in rows)
    # an export made by a process that holds the secret redacts it too
    out = tmp_path / "exported"
    r = _cli("export", "traces", "--db", str(tmp / "k.sqlite3"), "--out", str(out),
             env={**os.environ})
    assert r.returncode == 0, r.stderr
    assert SECRET not in _all_text(read_dataset(out))


def test_a_killed_run_keeps_every_judged_candidate_on_disk(tmp_path, examples_dir):
    script = ("import sys, openkernel\n"
              "for e in openkernel.optimize(sys.argv[1], overrides=sys.argv[2:]):\n"
              "    print(type(e).__name__, flush=True)\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(examples_dir / "gelu"), *_overrides(
            tmp_path, "job_name=killed", "max_iters=5", "branches_per_iteration=2", *FAST)],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    judged = 0
    deadline = time.monotonic() + 240
    try:
        for line in proc.stdout:
            judged += line.strip() == "CandidateEvaluated"
            if judged == 2 or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert judged == 2
    table = read_dataset(tmp_path / "traces")  # every file whole and readable
    assert table.num_rows >= 2 and set(table.column("session_status").to_pylist()) == {"running"}
    stored = {r.id for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "killed")
              if not r.is_program0}
    traced = set(table.column("kernel_id").to_pylist())
    # killed at most between a candidate's commit and its trace file: one may be missing
    assert traced <= stored and len(stored) - len(traced) <= 1


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "openkernel.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_readme_documents_every_trace_column():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for name, kind, meaning in COLUMNS:
        assert f"| `{name}` | {kind} | {meaning} |" in readme, name
    assert f"Schema version {SCHEMA_VERSION}" in readme
