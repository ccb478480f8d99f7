"""What real providers do, against a real OpenAI-compatible server on 127.0.0.1: Retry-After
honoured (timed with a fake clock, never a sleep), a refused connection and a client timeout
said as such (not "HTTP 500" / "HTTP 408"), a key echoed in a 401 body redacted, a model that
keeps failing paused (an ensemble goes on; with none left the generator says why), a streamed
answer bounded by timeout_s as a whole, and the tokens of cut-off or usage-less answers counted
and marked as estimates."""

from __future__ import annotations

import random
import socket
import sys
import time
from email.utils import formatdate
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from llm_server import Broken, ChatServer, Dead, Fail  # noqa: E402

from openkernel.config import ModelConfig  # noqa: E402
from openkernel.generators.llm import LLMError, LLMGenerator  # noqa: E402
from openkernel.generators.outages import MAX_RETRY_AFTER_S  # noqa: E402
from openkernel.redaction import redact  # noqa: E402

KEY_ENV = "OK_OUTAGE_VAR"  # a name the secret rules would not catch: configured, so redacted
KEY = "zz-echo-9f8e7d6c5b4a3210"


class FakeClock:
    """Time that passes only when slept through (or read, ``tick`` seconds a reading)."""

    def __init__(self, tick: float = 0.0) -> None:
        self.now, self.tick, self.slept = 1000.0, tick, []

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with ChatServer(default="Idea: x.\n\n```python\nclass ModelNew: pass\n```\n") as srv:
        yield srv


def _model(srv, name="m", **extra) -> ModelConfig:
    return ModelConfig(model=f"openai/{name}", api_base=srv.url if srv else None,
                       api_key_env=KEY_ENV, **{"num_retries": 2, **extra})


def _generator(*models: ModelConfig, clock: FakeClock | None = None) -> tuple[LLMGenerator, FakeClock]:
    clock = clock or FakeClock()
    return LLMGenerator(list(models), sleep=clock.sleep, clock=clock), clock


@pytest.mark.parametrize("stream", [True, False])
def test_retry_after_is_honoured(server, stream):
    cfg = _model(server, stream=stream)
    gen, clock = _generator(cfg)
    server.script = [Fail(429, "slow down", {"Retry-After": "7"})]
    done = gen.complete(cfg, "hi")
    assert done.call.attempts == 2 and len(server.requests) == 2
    assert clock.slept == [7.0]  # never sooner than asked (the backoff alone: 0.5-1 s)


def test_retry_after_as_a_date_and_beyond_the_limit(server):
    cfg = _model(server)
    gen, clock = _generator(cfg)
    server.script = [Fail(503, "busy", {"Retry-After": formatdate(time.time() + 5, usegmt=True)})]
    assert gen.complete(cfg, "hi").call.attempts == 2 and 3.0 <= clock.slept[0] <= 6.0
    clock.slept.clear()
    server.script = [Fail(429, "quota", {"Retry-After": str(int(MAX_RETRY_AFTER_S) + 1)})]
    with pytest.raises(LLMError, match="asked to retry after 601 s") as err:
        gen.complete(cfg, "hi")  # a daily quota: waiting it out is no retry
    assert clock.slept == [] and err.value.attempts == 1


def test_backoff_is_jittered_and_grows(server):
    cfg = _model(server, num_retries=3)
    gen, clock = _generator(cfg)
    server.script = [(500, "a"), (502, "b"), (503, "c")]
    assert gen.complete(cfg, "hi").call.attempts == 4
    first, second, third = clock.slept
    assert 0.5 <= first <= 1.0 and 1.0 <= second <= 2.0 and 2.0 <= third <= 4.0


def test_a_401_echoing_the_key_is_redacted_and_not_retried(server):
    cfg = _model(server)
    gen, _ = _generator(cfg)
    server.script = [Fail(401, "Incorrect API key provided: {key}. Get one at example.com")]
    with pytest.raises(LLMError) as err:
        gen.complete(cfg, "hi")
    assert KEY in server.requests[0]["_auth"]  # the server did get it, and echoed it back
    message = str(err.value)
    assert KEY not in message and "[REDACTED]" in message and "HTTP 401" in message
    assert not err.value.transient and len(server.requests) == 1


def test_connection_refused_and_client_timeout_are_said_as_such(server):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    cfg = ModelConfig(model="openai/m", api_base=url, api_key_env=KEY_ENV, num_retries=1)
    gen, clock = _generator(cfg)
    with pytest.raises(LLMError) as err:
        gen.complete(cfg, "hi")
    assert str(err.value).startswith("connection failed:") and "Connection refused" in str(err.value)
    assert "HTTP" not in str(err.value) and err.value.attempts == 2 and len(clock.slept) == 1
    server.delay_s = 1.0  # the server thinks for a second: a client waiting 0.3 s gives up
    slow = _model(server, stream=False, timeout_s=0.3, num_retries=0)
    with pytest.raises(LLMError) as err:
        _generator(slow)[0].complete(slow, "hi")
    assert str(err.value) == "timeout: no answer within timeout_s (0.3 s): the client stopped waiting"


def test_timeout_s_bounds_a_streamed_answer_as_a_whole(server):
    """Pieces keep coming (no silence the client would time out on), but the answer is still
    coming when timeout_s has passed: it is cut off there. The fake clock moves 1 s a reading."""
    server.chunk_chars = 4
    cfg = _model(server, timeout_s=3.0, num_retries=0)
    gen, _ = _generator(cfg, clock=FakeClock(tick=1.0))
    with pytest.raises(LLMError) as err:
        gen.complete(cfg, "hi")
    assert str(err.value).startswith("timeout: the streamed answer was still coming when "
                                     "timeout_s ran out")
    spent = err.value.spent  # the pieces that came were paid for: counted, marked estimated
    assert spent is not None and spent.estimated and spent.completion_tokens > 0


def test_tokens_of_a_cut_off_stream_and_of_usage_less_answers_are_estimates(server):
    cfg = _model(server)
    gen, _ = _generator(cfg)
    served = gen.complete(cfg, "one two three").call
    assert not served.estimated and served.prompt_tokens == 3  # the server's count (words)
    server.script = [Broken("Idea: half an answer that breaks off")]
    broken = gen.complete(cfg, "one two three").call
    assert broken.estimated and broken.attempts == 2
    assert broken.prompt_tokens > served.prompt_tokens and broken.completion_tokens > served.completion_tokens
    server.usage = False
    for stream in (True, False):
        quiet = _model(server, stream=stream)
        call = _generator(quiet)[0].complete(quiet, "one two three").call
        assert call.estimated and call.prompt_tokens > 0 and call.completion_tokens > 0


def test_a_model_that_keeps_failing_is_paused_and_the_ensemble_goes_on(server):
    good, bad = _model(server, "good", num_retries=0), _model(server, "bad", num_retries=0,
                                                            max_consecutive_failures=2)
    gen, _ = _generator(good, bad)
    for _ in range(2):
        server.script = [(500, "down")]
        with pytest.raises(LLMError):
            gen.complete(bad, "hi")
    assert gen.take_notices() == [
        "openai/bad: 2 consecutive calls failed (last: InternalServerError (HTTP 500): "
        "litellm.InternalServerError: InternalServerError: OpenAIException - down); paused for "
        "the rest of the run, the ensemble goes on with openai/good"]
    assert gen.take_notices() == [] and gen.outage == ""
    assert {gen.pick(random.Random(seed)).model for seed in range(20)} == {"openai/good"}
    # one success resets a model's count; with every model paused the generator says why
    server.script = [(500, "down")]
    with pytest.raises(LLMError):
        gen.complete(good, "hi")
    gen.complete(good, "hi")
    server.script = [Dead()]
    for _ in range(3):
        with pytest.raises(LLMError):
            gen.complete(good, "hi")
    assert gen.outage.startswith("every model failed too often: openai/bad: 2 consecutive")
    assert "openai/good: 3 consecutive calls failed (last: connection failed:" in gen.outage


def test_the_one_redactor_masks_configured_values_and_key_shapes(monkeypatch):
    from openkernel.redaction import Redactor, add_secret

    monkeypatch.setenv("PLAIN_NAME", "nothing-secret-here")
    add_secret("configured-value-xyz")
    text = ("Bearer abcdefgh12345678 and sk-proj-ABCDEFGHIJKLMNOPQRSTUV and ghp_0123456789abcdef"
            "ABCDEFGHij and AKIAABCDEFGHIJKLMNOP and configured-value-xyz, nothing-secret-here, "
            "sk-short, task-mask")
    out = redact(text)
    for secret in ("abcdefgh12345678", "sk-proj-ABCDEFGHIJKLMNOPQRSTUV", "ghp_0123456789abcdef",
                   "AKIAABCDEFGHIJKLMNOP", "configured-value-xyz"):
        assert secret not in out
    assert "nothing-secret-here" in out and "sk-short" in out and "task-mask" in out
    assert "configured-value-xyz" in Redactor({}).secrets
