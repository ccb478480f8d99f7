"""The LLM generator against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import ChatServer  # noqa: E402

from openkernel.config import Config  # noqa: E402
from openkernel.generators import make_generator  # noqa: E402
from openkernel.generators.base import ProposalRequest  # noqa: E402
from openkernel.records import TaskProbe  # noqa: E402
from openkernel.schemas import EvalResult, Program  # noqa: E402
from openkernel.task import load_task  # noqa: E402

KEY_ENV = "OPENKERNEL_TEST_KEY"
GOOD = ("Idea: one masked elementwise kernel with BLOCK=1024.\n"
        "The reference is memory bound, so one read and one write.\n\n"
        "```python\nimport torch\nimport triton\n\n\nclass ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        return x\n```\n")


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-dummy")
    with ChatServer(default=GOOD) as srv:
        yield srv


def _generator(srv, models=("model-a",), weights=None, **extra):
    inference = [{"model": f"openai/{m}", "api_base": srv.url, "api_key_env": KEY_ENV,
                  "weight": (weights or [1.0] * len(models))[i], "num_retries": 2}
                 for i, m in enumerate(models)]
    return make_generator(Config(inference=inference, **extra), backoff_s=0.01)


def _request(examples_dir, seed=0, parent=None):
    task = load_task(examples_dir / "gelu")
    probe = TaskProbe(ok=True, aten_ops=["aten.gelu.default"], input_shapes=[[64, 1024]],
                      input_dtypes=["torch.float32"])
    return ProposalRequest(task=task, probe=probe, backend="triton", iteration=1, branch=0,
                           parent=parent, best=None, user_instructions=task.user_instructions,
                           rng=random.Random(seed))


def test_ensemble_uses_both_models(server, examples_dir):
    gen = _generator(server, models=("model-a", "model-b"), weights=[1.0, 3.0])
    assert gen.name == "llm" and gen.models == ["openai/model-a", "openai/model-b"]
    proposals = [gen.propose(_request(examples_dir, seed)) for seed in range(8)]
    assert {r["model"] for r in server.requests} == {"model-a", "model-b"}
    assert {p.model for p in proposals} == {"openai/model-a", "openai/model-b"}
    assert all(r["_auth"] == "Bearer sk-test-dummy" for r in server.requests)
    p = proposals[0]
    assert p.origin == "llm" and p.code.startswith("import torch") and "class ModelNew" in p.code
    assert p.description == "one masked elementwise kernel with BLOCK=1024."
    assert "memory bound" in p.reasoning and p.answer == GOOD and p.log == ""
    assert p.tokens_used > 0 and p.latency_s > 0
    sent = server.requests[0]["messages"][0]["content"]
    assert sent == p.prompt and "## Reference implementation" in sent


def test_malformed_answer_is_stored_with_empty_code(server, examples_dir):
    server.script = ["I think a Triton kernel with tl.load would be fastest here."]
    p = _generator(server).propose(_request(examples_dir))
    assert p.code == "" and "no fenced code block" in p.log
    assert p.answer.startswith("I think") and p.tokens_used > 0


@pytest.mark.parametrize("status", [500, 429])
def test_transient_error_is_retried(server, examples_dir, status):
    server.script = [(status, "try again")]
    p = _generator(server).propose(_request(examples_dir))
    assert len(server.requests) == 2
    assert "class ModelNew" in p.code and "answered after 2 attempts" in p.log


def test_retries_give_up_after_num_retries(server, examples_dir):
    server.script = [(503, "down")] * 5
    p = _generator(server).propose(_request(examples_dir))
    assert len(server.requests) == 3  # the first call and num_retries=2 retries
    assert p.code == "" and "after 3 attempts" in p.log and "503" in p.log


def test_auth_error_is_not_retried(server, examples_dir):
    server.script = [(401, "invalid api key")]
    p = _generator(server).propose(_request(examples_dir))
    assert len(server.requests) == 1
    assert p.code == "" and p.answer == ""
    assert "not retried" in p.log and "401" in p.log and "invalid api key" in p.log
    assert "## Task" in p.prompt  # the prompt is still recorded


def test_missing_key_variable_fails_without_a_request(server, examples_dir, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    p = _generator(server).propose(_request(examples_dir))
    assert server.requests == [] and p.code == "" and KEY_ENV in p.log


def test_feedback_llm_condenses_a_long_parent_log(server, examples_dir):
    def answer(body):
        text = body["messages"][0]["content"]
        return ("RuntimeError: misaligned address at line 12" if text.startswith(
            "Below is the build/test log") else GOOD)

    server.default = answer
    log = "\n".join(f"noise {i}" for i in range(3000)) + "\nRuntimeError: misaligned address"
    parent = Program(id="par", code="import torch\nclass ModelNew: pass\n", iteration_found=0,
                     metadata={"branch": 1})
    parent.add_eval_results(EvalResult(compiled=True, perf_score=1, eval_log=log))
    p = _generator(server, use_feedback_llm=True).propose(_request(examples_dir, parent=parent))
    assert len(server.requests) == 2
    generation = server.requests[1]["messages"][0]["content"]
    assert "summarised by the feedback model" in generation and "noise 17" not in generation
    assert "condensed by the feedback model" in p.log and "class ModelNew" in p.code
    # Without use_feedback_llm the same log is condensed deterministically, with no extra call.
    server.requests.clear()
    p = _generator(server).propose(_request(examples_dir, parent=parent))
    assert len(server.requests) == 1 and "condensed deterministically" in p.log
    assert "RuntimeError: misaligned address" in server.requests[0]["messages"][0]["content"]


def test_engine_imports_without_litellm():
    code = ("import sys\nfrom openkernel.config import Config\n"
            "from openkernel.generators import make_generator\n"
            "g = make_generator(Config())\nassert g.name == 'offline'\n"
            "assert 'litellm' not in sys.modules, 'litellm imported eagerly'\n")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_streamed_answer_arrives_in_pieces_with_usage_and_cost(server, examples_dir):
    server.chunk_chars = 7
    pieces = []
    request = _request(examples_dir)
    request.on_text = lambda model, text, attempt: pieces.append((model, text, attempt))
    p = _generator(server, models=("gpt-4o-mini",)).propose(request)
    assert server.requests[0]["stream"] is True
    assert len(pieces) == -(-len(GOOD) // 7) and "".join(t for _, t, _ in pieces) == GOOD
    assert {m for m, _, _ in pieces} == {"openai/gpt-4o-mini"} and {a for *_, a in pieces} == {1}
    assert p.answer == GOOD and "class ModelNew" in p.code
    (call,) = p.calls
    prompt_words = len(server.requests[0]["messages"][0]["content"].split())
    assert (call.prompt_tokens, call.completion_tokens) == (prompt_words, len(GOOD.split()))
    assert call.purpose == "generate" and call.price == "litellm" and call.cost_usd > 0
    # litellm's own price for the model, not a number of ours
    import litellm

    expected = sum(litellm.cost_per_token(model="openai/gpt-4o-mini", prompt_tokens=prompt_words,
                                          completion_tokens=len(GOOD.split())))
    assert abs(call.cost_usd - expected) < 1e-12 and p.tokens_used == call.tokens


def test_local_price_entry_and_unknown_price(server, examples_dir):
    gen = _generator(server, models=("my-vllm-model",))
    p = gen.propose(_request(examples_dir))
    assert p.calls[0].price == "unknown" and p.calls[0].cost_usd == 0.0  # never guessed
    priced = Config(inference=[{"model": "openai/my-vllm-model", "api_base": server.url,
                                "api_key_env": KEY_ENV, "price": {"input_usd_per_mtok": 2.0,
                                                                  "output_usd_per_mtok": 6.0}}])
    call = make_generator(priced).propose(_request(examples_dir)).calls[0]
    assert call.price == "config"
    assert abs(call.cost_usd - (call.prompt_tokens * 2 + call.completion_tokens * 6) / 1e6) < 1e-15


def test_a_stream_that_breaks_off_is_retried_from_the_start(server, examples_dir):
    from llm_server import Broken

    server.script = [Broken("Idea: half an ans")]
    pieces = []
    request = _request(examples_dir)
    request.on_text = lambda model, text, attempt: pieces.append((text, attempt))
    p = _generator(server).propose(request)
    assert len(server.requests) == 2 and "answered after 2 attempts" in p.log
    assert pieces[0][1] == 1 and pieces[-1][1] == 2  # the retry restarts the answer
    assert "".join(t for t, a in pieces if a == 2) == GOOD and p.answer == GOOD
    assert p.calls[0].attempts == 2


def test_stream_off_for_servers_that_cannot(server, examples_dir):
    gen = make_generator(Config(inference=[{"model": "openai/m", "api_base": server.url,
                                            "api_key_env": KEY_ENV, "stream": False}]))
    pieces = []
    request = _request(examples_dir)
    request.on_text = lambda *piece: pieces.append(piece)
    p = gen.propose(request)
    assert "stream" not in server.requests[0] and pieces == [] and "class ModelNew" in p.code
    assert p.calls[0].completion_tokens == len(GOOD.split())
