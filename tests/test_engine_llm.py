"""The engine's LLM path end to end: a real OpenAI-compatible server on 127.0.0.1 answers
(streamed), the kernel it wrote is built and judged under the interpreter, the critic's
diagnosis joins the next prompts, costs are counted and budgets stop the run. A model that
cannot be reached stops the run before its first candidate; an error of the model's service
mid-run is a generation failure, never a build status."""

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

import openkernel
from openkernel import events as ev
from openkernel.store import Run, Store

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer, critic_json, is_critic  # noqa: E402

KERNEL = '''Idea: one program per 4096 elements, exact erf GELU, masked tail.

```python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        gelu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096)
        return y
```
'''


def answer(body):
    """The model: a critic's JSON when asked as the critic, else the kernel."""
    return critic_json(body) if is_critic(body) else KERNEL


def _run(tmp_path, examples_dir, server, *extra, models=("openai/model-a",), job="llm"):
    inference = json.dumps([{"model": m, "api_base": server.url, "api_key_env": "OK_TEST_KEY",
                             **({"price": {"input_usd_per_mtok": 1000.0,
                                           "output_usd_per_mtok": 3000.0}}
                                if m.endswith("priced") else {})} for m in models])
    return list(openkernel.optimize(examples_dir / "gelu", overrides=[
        f"inference={inference}", "max_iters=2", "branches_per_iteration=2",
        "eval_config.max_workers=1", f"job_name={job}", "search.seed=3",
        f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
        f"paths.scratch_dir={tmp_path / 'scratch'}", *extra]))


def test_llm_search_end_to_end(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=answer) as server:
        server.script = [KERNEL, "I could not write it this time, sorry."]
        inference = ('[{"model": "openai/model-a", "api_base": "%s", "api_key_env": "OK_TEST_KEY"}]'
                     % server.url)
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=[
            f"inference={inference}", "max_iters=2", "branches_per_iteration=2",
            "eval_config.max_workers=1", "job_name=llm", "search.seed=3",
            f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}",
            "user_instructions=Prefer one pass over memory."]))
    assert events[0].generator == "llm" and events[0].models == ("openai/model-a",)
    assert events[-1].reason == "completed", events[-1].error
    assert len(server.pings) == 1  # one preflight, then the run
    assert len(server.generation_requests()) == 4
    assert len(server.requests) == 6  # and the critic: before iteration 1, after the last
    prompt = server.requests[0]["messages"][-1]["content"]
    assert "Prefer one pass over memory." in prompt and "class Model" in prompt
    assert "sk-test-not-a-real-key" in server.requests[0]["_auth"]

    rows = [r for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "llm") if not r.is_program0]
    assert len(rows) == 4
    malformed = [r for r in rows if not r.code]  # no kernel in the answer: nothing was built
    assert len(malformed) == 1 and malformed[0].status == "generation_failed"
    assert malformed[0].meta["generation_failed"] == "no_code"
    assert "sorry" in malformed[0].answer and "nothing was built" in malformed[0].eval_log
    judged = [r for r in rows if r.code]
    assert all(r.correctness and r.model == "openai/model-a" and r.prompt for r in judged)
    # The same kernel came back three times: built and judged once, reused twice.
    duplicates = [r for r in judged if r.meta.get("duplicate_of")]
    assert len(duplicates) == 2 and "reused" in duplicates[0].eval_log
    stored = (tmp_path / "k.sqlite3").read_bytes()
    assert b"sk-test-not-a-real-key" not in stored  # the key never reaches the database
    assert all(e.program.kernel_exec_result.runtime > 0 for e in events
               if isinstance(e, ev.CandidateEvaluated) and e.program.code)
    # streamed: the pieces of each answer arrived as events and add up to the stored answer
    streamed: dict[str, str] = {}
    for e in events:
        if isinstance(e, ev.AnswerStreamed):
            streamed[e.label] = streamed.get(e.label, "") + e.delta
    assert streamed == {r.label: r.answer for r in rows}
    assert all(r["stream"] for r in server.requests)


@pytest.mark.parametrize("critic", ["llm", "rules"])
def test_the_critics_diagnosis_joins_the_next_prompts(tmp_path, examples_dir, monkeypatch, critic):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=answer) as server:
        events = _run(tmp_path, examples_dir, server, f"critic.use_llm={critic == 'llm'}")
    assert events[-1].reason == "completed", events[-1].error
    store = Store(tmp_path / "k.sqlite3")
    critiques = store.job_critiques("gelu", "llm")
    rows = {r.label: r for r in store.job_kernels("gelu", "llm")}
    first = [c for c in critiques if c.iteration == 0]
    assert first and first[0].role == "best"
    best_after_0 = next(r for r in rows.values() if r.id == first[0].kernel_id)
    top = max(r.score for r in rows.values() if r.iteration == 0 and r.correctness)
    assert best_after_0.iteration == 0 and best_after_0.score == top
    assert {c.source for c in critiques} == {critic}
    said = [e for e in events if isinstance(e, ev.CriticDiagnosed)]
    assert [e.iteration for e in said] == [0, 1]
    for row in (r for r in rows.values() if r.iteration == 1):
        prompt = row.prompt
        section = prompt[prompt.index("## Critic's diagnosis"):prompt.index("## Inspirations")]
        assert first[0].text in section and best_after_0.label in section
        assert [d["kernel_id"] for d in row.meta["critic"]][0] == best_after_0.id
        if critic == "llm":
            assert "CRITIC-MODEL-SAYS" in section and "critic model openai/model-a" in section
    iteration0 = [r for r in rows.values() if r.iteration == 0 and not r.is_program0]
    assert all("None yet: the critic writes one" in r.prompt for r in iteration0)
    if critic == "llm":
        asked = [r["messages"][0]["content"] for r in server.requests if is_critic(r)]
        assert len(asked) == 2
        # the critic read the profile (the analytic estimate here), the roofline and results
        assert "Profile: No profile; analytic estimate" in asked[0]
        assert "Roofline: Timed under the Triton interpreter" in asked[0]
        assert "## Results of iteration 0" in asked[0] and "i0-b0: faster" in asked[0] or \
            "i0-b0: correct" in asked[0]
        assert all(c.model == "openai/model-a" and "CRITIC-MODEL-SAYS" in c.text for c in critiques)
        calls = store.job_llm_calls("gelu", "llm")
        assert [c.purpose for c in calls].count("critic") == 2 and all(
            c.kernel_id is None for c in calls if c.purpose == "critic")
    else:
        assert all(r.purpose == "generate" for r in store.job_llm_calls("gelu", "llm"))
        assert "Best so far" in first[0].text


def test_a_critic_that_answers_nonsense_leaves_the_rules_in_place(tmp_path, examples_dir,
                                                                  monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=lambda b: "no json here" if is_critic(b) else KERNEL) as server:
        events = _run(tmp_path, examples_dir, server, "max_iters=1")
    warnings = [e.message for e in events if isinstance(e, ev.LogEmitted) and e.level == "warning"]
    assert any("critic model openai/model-a gave no usable diagnosis" in w for w in warnings)
    critiques = Store(tmp_path / "k.sqlite3").job_critiques("gelu", "llm")
    assert critiques and all(c.source == "rules" for c in critiques)


def test_costs_are_summed_per_model(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=answer) as server:
        events = _run(tmp_path, examples_dir, server, "branches_per_iteration=3",
                      models=("openai/model-priced", "openai/model-free"))
    finished = events[-1]
    assert finished.reason == "completed", finished.error
    calls = [e for e in events if isinstance(e, ev.ModelCalled)]
    store = Store(tmp_path / "k.sqlite3")
    stored = store.job_llm_calls("gelu", "llm")
    assert len(calls) == len(stored) == len(server.requests) == 8  # 6 candidates, 2 critic rounds
    spend = finished.spend
    by_model = {m.model: m for m in spend.models}
    for model, m in by_model.items():
        mine = [c for c in stored if c.model == model]
        assert m.calls == len(mine) and m.prompt_tokens == sum(c.prompt_tokens for c in mine)
        assert m.completion_tokens == sum(c.completion_tokens for c in mine)
        assert abs(m.cost_usd - sum(c.cost_usd for c in mine)) < 1e-12
    priced, free = by_model["openai/model-priced"], by_model["openai/model-free"]
    assert priced.cost_usd == pytest.approx(
        (priced.prompt_tokens * 1000 + priced.completion_tokens * 3000) / 1e6)
    assert priced.unpriced_calls == 0 and free.cost_usd == 0 and free.unpriced_calls == free.calls
    assert "unknown" in spend.cost_text() and calls[-1].spend.tokens == spend.tokens
    assert spend.tokens == sum(c.prompt_tokens + c.completion_tokens for c in stored) > 0
    # per candidate: its generation call, in its metadata and joined by kernel id
    for row in store.job_kernels("gelu", "llm"):
        if row.is_program0:
            continue
        mine = [c for c in stored if c.kernel_id == row.id]
        assert len(mine) == 1 and mine[0].model == row.model and mine[0].label == row.label
        assert row.meta["llm"]["cost_usd"] == pytest.approx(mine[0].cost_usd)
        assert row.tokens_used == mine[0].prompt_tokens + mine[0].completion_tokens


@pytest.mark.parametrize("limit", ["budget.max_tokens=1", "budget.max_usd=0.001"])
def test_a_budget_stops_the_run_between_candidates(tmp_path, examples_dir, monkeypatch, limit):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=answer) as server:
        events = _run(tmp_path, examples_dir, server, limit, "max_iters=3",
                      models=("openai/model-priced",))
    finished = events[-1]
    key = limit.split("=")[0]
    assert finished.reason == "stopped" and finished.error.startswith(f"{key} reached")
    reached = [e for e in events if isinstance(e, ev.BudgetReached)]
    assert len(reached) == 1 and reached[0].reason.startswith(f"{key} reached")
    # the candidates generated before the limit was seen (both branches of iteration 0 start
    # together) are judged and stored; no more, and no critic call after it
    judged = [e.label for e in events if isinstance(e, ev.CandidateEvaluated)]
    assert judged and set(judged) <= {"i0-b0", "i0-b1"}
    assert len(server.generation_requests()) == len(judged)
    assert not any(is_critic(r) for r in server.requests)
    store = Store(tmp_path / "k.sqlite3")
    with store.session() as s:
        run = s.scalars(select(Run)).one()
    assert run.status == "stopped" and run.error == finished.error
    # resuming the job with the same budget stops at once: the job's spend counts
    with ChatServer(default=answer) as server:
        again = _run(tmp_path, examples_dir, server, limit, "max_iters=3",
                     models=("openai/model-priced",))
    assert again[-1].reason == "stopped" and server.requests == []
    assert again[-1].spend.calls == finished.spend.calls


def test_cli_run_prints_the_spend_and_the_budget_reason(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=answer) as server:
        inference = json.dumps([{"model": m, "api_base": server.url, "api_key_env": "OK_TEST_KEY"}
                                for m in ("openai/model-free", "openai/gpt-4o-mini")])
        r = subprocess.run([sys.executable, "-m", "openkernel.cli", "run", str(examples_dir / "gelu"),
                            "--set", f"inference={inference}", "--set", "max_iters=3",
                            "--set", "branches_per_iteration=2", "--set", "budget.max_tokens=3000",
                            "--set", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
                            "--set", f"paths.scratch_dir={tmp_path / 'scratch'}",
                            "--set", "eval_config.max_workers=1", "--set", "search.seed=2"],
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = " ".join(r.stdout.split())
    # the next call could pass the limit: none started, and the total is the true one
    assert "stopped because budget.max_tokens" in out and "tokens used of 3,000" in out
    # the critic is the first model, priced unknown: the summary says so, with a table
    assert "model calls:" in out and "+ unknown" in out
    assert "│ openai/model-free" in r.stdout and "$0.00 + unknown" in r.stdout


def _run_inference(tmp_path, examples_dir, inference: str, *extra):
    """One iteration of two branches with this ``inference`` list (as YAML or JSON)."""
    return list(openkernel.optimize(examples_dir / "gelu", overrides=[
        f"inference={inference}", "max_iters=1", "branches_per_iteration=2",
        "eval_config.max_workers=1", "job_name=llm", "search.seed=3",
        f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
        f"paths.scratch_dir={tmp_path / 'scratch'}", *extra]))


def _refused(events) -> str:
    """The run stopped before its first candidate: its one event, and the message."""
    assert [type(e).__name__ for e in events] == ["RunFinished"], events
    assert events[0].reason == "failed" and events[0].candidates == 0
    return events[0].error


def test_missing_provider_key_stops_before_the_first_candidate(tmp_path, examples_dir, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    error = _refused(_run_inference(tmp_path, examples_dir, "[{model: openai/gpt-4.1}]"))
    assert "openai/gpt-4.1" in error and "OPENAI_API_KEY" in error
    assert not (tmp_path / "k.sqlite3").exists() or not Store(tmp_path / "k.sqlite3").list_jobs()
    # the CLI: exit 2, the message once, no traceback, no build status
    r = subprocess.run([sys.executable, "-m", "openkernel.cli", "run", str(examples_dir / "gelu"),
                        "--set", "inference=[{model: openai/gpt-4.1}]",
                        "--set", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={k: v for k, v in __import__("os").environ.items() if k != "OPENAI_API_KEY"})
    assert r.returncode == 2, r.stdout + r.stderr
    out = r.stdout + r.stderr
    assert out.count("OPENAI_API_KEY") == 1 and "openai/gpt-4.1" in r.stderr
    assert "Traceback" not in out and "compile_error" not in out


def test_missing_api_key_env_names_that_variable(tmp_path, examples_dir, monkeypatch):
    monkeypatch.delenv("OK_UNSET_KEY", raising=False)
    with ChatServer(default=KERNEL) as server:
        error = _refused(_run_inference(
            tmp_path, examples_dir, '[{"model": "openai/model-a", "api_base": "%s", '
            '"api_key_env": "OK_UNSET_KEY"}]' % server.url))
    assert "openai/model-a" in error and "OK_UNSET_KEY" in error
    assert server.pings == [] and server.requests == []  # nothing was sent without a key


def test_refused_key_stops_before_the_first_candidate(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-revoked")
    with ChatServer(default=KERNEL) as server:
        server.ping = (401, "Incorrect API key provided")
        error = _refused(_run_inference(
            tmp_path, examples_dir, '[{"model": "openai/model-a", "api_base": "%s", '
            '"api_key_env": "OK_TEST_KEY"}]' % server.url))
    assert "openai/model-a" in error and "OK_TEST_KEY" in error and "401" in error
    assert len(server.pings) == 1 and server.requests == []


def test_unreachable_api_base_stops_before_the_first_candidate(tmp_path, examples_dir):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    error = _refused(_run_inference(
        tmp_path, examples_dir,
        '[{"model": "hosted_vllm/local", "api_base": "%s", "num_retries": 1}]' % url))
    assert "hosted_vllm/local cannot be reached" in error and url in error


def test_service_error_mid_run_is_a_generation_failure(tmp_path, examples_dir, monkeypatch):
    """A 503 after the preflight: that candidate is "generation_failed" (no build status), the
    run goes on, and resuming the job tries that branch again."""
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    inference = ('[{"model": "openai/model-a", "api_base": "%s", "api_key_env": "OK_TEST_KEY", '
                 '"num_retries": 0}]')
    with ChatServer(default=KERNEL) as server:
        server.script = [(503, "The server is overloaded")]
        events = _run_inference(tmp_path, examples_dir, inference % server.url)
        assert events[-1].reason == "completed", events[-1].error
        judged = {e.label: e for e in events if isinstance(e, ev.CandidateEvaluated)}
        failed = [e for e in judged.values() if e.status.value == "generation_failed"]
        assert len(failed) == 1 and len(judged) == 2
        assert all(e.status.value != "compile_error" for e in judged.values())
        rows = {r.label: r for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "llm")}
        row = rows[failed[0].label]
        assert row.status == "generation_failed" and row.meta["generation_failed"] == "service"
        assert row.code == "" and not row.compiled and "service gave no answer" in row.eval_log
        assert "503" in row.generation_log and "overloaded" in row.generation_log
        # resumed: only the failed branch runs again, and its new row replaces the failure
        again = _run_inference(tmp_path, examples_dir, inference % server.url)
    assert [e.label for e in again if isinstance(e, ev.CandidateEvaluated)] == [failed[0].label]
    assert again[0].resumed_candidates == 1 and again[-1].candidates == 2
    rows = [r for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "llm") if not r.is_program0]
    assert sorted(r.label for r in rows) == ["i0-b0", "i0-b1"]
    assert all(r.status != "generation_failed" for r in rows)


def test_a_retried_generation_failure_replaces_its_trace_too(tmp_path, examples_dir, monkeypatch):
    """With traces on, the retry of a generation failure on resume replaces the failure's
    trace file as it replaces its row: the dataset and the database hold the same candidates."""
    from openkernel.store.traces import read_dataset

    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    inference = ('[{"model": "openai/model-a", "api_base": "%s", "api_key_env": "OK_TEST_KEY", '
                 '"num_retries": 0}]')
    traces = ["traces.enabled=true", f"traces.dir={tmp_path / 'traces'}"]
    with ChatServer(default=KERNEL) as server:
        server.script = [(503, "The server is overloaded")]
        first = _run_inference(tmp_path, examples_dir, inference % server.url, *traces)
        assert "generation_failed" in {r["status"] for r in
                                       read_dataset(tmp_path / "traces").to_pylist()}
        again = _run_inference(tmp_path, examples_dir, inference % server.url, *traces)
    assert first[-1].reason == again[-1].reason == "completed"
    rows = [r for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "llm") if not r.is_program0]
    traced = read_dataset(tmp_path / "traces").to_pylist()
    assert sorted(t["kernel_id"] for t in traced) == sorted(r.id for r in rows)
    assert all(t["status"] != "generation_failed" for t in traced)


@pytest.mark.parametrize("answer", ["I could not write it, sorry."])
def test_cli_shows_a_generation_failure_as_such(tmp_path, examples_dir, monkeypatch, answer):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test")
    with ChatServer(default=answer) as server:
        r = subprocess.run([sys.executable, "-m", "openkernel.cli", "run", str(examples_dir / "gelu"),
                            "--set", 'inference=[{"model": "openai/m", "api_base": "%s", '
                            '"api_key_env": "OK_TEST_KEY"}]' % server.url,
                            "--set", "max_iters=1", "--set", "branches_per_iteration=1",
                            "--set", f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
                            "--set", f"paths.scratch_dir={tmp_path / 's'}"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "i0-b0    generation_failed" in r.stdout and "compile_error" not in r.stdout


def test_a_critic_model_without_its_key_stops_before_the_first_candidate(tmp_path, examples_dir,
                                                                        monkeypatch):
    """The offline generator with an LLM critic: the critic's model is checked before the
    first candidate as the ensemble's are, and the message says it is the critic's."""
    monkeypatch.delenv("OK_UNSET_KEY", raising=False)
    with ChatServer(default=KERNEL) as server:
        events = list(openkernel.optimize(examples_dir / "gelu", overrides=[
            "max_iters=1", "branches_per_iteration=1", "job_name=critic-key",
            'critic.model={"model": "openai/critic", "api_base": "%s", '
            '"api_key_env": "OK_UNSET_KEY"}' % server.url,
            f"paths.kernels_db_path={tmp_path / 'k.sqlite3'}",
            f"paths.scratch_dir={tmp_path / 'scratch'}"]))
    error = _refused(events)
    assert error.startswith("critic.model: openai/critic") and "OK_UNSET_KEY" in error
    assert server.requests == []
