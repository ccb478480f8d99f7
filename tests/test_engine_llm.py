"""The engine's LLM path end to end: a real OpenAI-compatible server on 127.0.0.1 answers,
the kernel it wrote is built and judged under the interpreter, and the database records it.
A model that cannot be reached stops the run before its first candidate; an error of the
model's service mid-run is a generation failure, never a build status."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

import openkernel
from openkernel import events as ev
from openkernel.store import Store

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer  # noqa: E402

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


def test_llm_search_end_to_end(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-test-not-a-real-key-123456")
    with ChatServer(default=KERNEL) as server:
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
    assert len(server.pings) == 1 and len(server.requests) == 4  # one preflight, then the run
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


def _run(tmp_path, examples_dir, inference: str, *extra):
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
    error = _refused(_run(tmp_path, examples_dir, "[{model: openai/gpt-4.1}]"))
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
        error = _refused(_run(tmp_path, examples_dir, '[{"model": "openai/model-a", "api_base": "%s", '
                              '"api_key_env": "OK_UNSET_KEY"}]' % server.url))
    assert "openai/model-a" in error and "OK_UNSET_KEY" in error
    assert server.pings == [] and server.requests == []  # nothing was sent without a key


def test_refused_key_stops_before_the_first_candidate(tmp_path, examples_dir, monkeypatch):
    monkeypatch.setenv("OK_TEST_KEY", "sk-revoked")
    with ChatServer(default=KERNEL) as server:
        server.ping = (401, "Incorrect API key provided")
        error = _refused(_run(tmp_path, examples_dir, '[{"model": "openai/model-a", "api_base": "%s", '
                              '"api_key_env": "OK_TEST_KEY"}]' % server.url))
    assert "openai/model-a" in error and "OK_TEST_KEY" in error and "401" in error
    assert len(server.pings) == 1 and server.requests == []


def test_unreachable_api_base_stops_before_the_first_candidate(tmp_path, examples_dir):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    error = _refused(_run(tmp_path, examples_dir,
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
        events = _run(tmp_path, examples_dir, inference % server.url)
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
        again = _run(tmp_path, examples_dir, inference % server.url)
    assert [e.label for e in again if isinstance(e, ev.CandidateEvaluated)] == [failed[0].label]
    assert again[0].resumed_candidates == 1 and again[-1].candidates == 2
    rows = [r for r in Store(tmp_path / "k.sqlite3").job_kernels("gelu", "llm") if not r.is_program0]
    assert sorted(r.label for r in rows) == ["i0-b0", "i0-b1"]
    assert all(r.status != "generation_failed" for r in rows)


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
