"""The LLM generator: litellm with any model string, an ensemble sampled by weight.

litellm is imported on first use (with its price map kept local: no network at import), so
the engine imports without it. Retries are ours rather than litellm's ``num_retries``: that
path delegates to the provider SDK's own retry loop, whose backoff cannot be set per call and
differs between providers; here transient failures (connection errors, timeouts, 408/409/429,
5xx) are retried ``ModelConfig.num_retries`` times with jittered exponential backoff, and
everything else (401, 400) fails at once.

Before the first candidate, :meth:`LLMGenerator.preflight` checks that each model's key is set
and that its service answers a one-token request: a model that cannot be reached stops the run
with one message naming the model and the variable. A failure later in the run is a generation
failure of that candidate (``Proposal.failed``): a Proposal with empty code and a log that says
why, stored as such, and the search goes on.

Answers are streamed by default (``ModelConfig.stream``): ``ProposalRequest.on_text`` gets each
piece as it arrives (kernel-code shows it in the chat). Every answered call comes back as a
typed ``LLMCall`` (tokens in and out, cost, where the price came from: see ``costs``).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from openkernel.config import ModelConfig
from openkernel.costs import LLMCall, litellm_module, price_call
from openkernel.generators.base import Proposal, ProposalRequest
from openkernel.generators.extract import extract_code
from openkernel.generators.feedback import LogCondenser
from openkernel.generators.prompt import build_prompt
from openkernel.records import TaskProbe
from openkernel.task import Task

_TRANSIENT_STATUS = {408, 409, 425, 429}
_TRANSIENT_NAMES = {"Timeout", "APIConnectionError", "RateLimitError", "InternalServerError",
                    "ServiceUnavailableError", "BadGatewayError"}
# litellm reports a key the OpenAI client cannot find as an InternalServerError (HTTP 500):
# retrying it cannot help.
_NO_CREDENTIALS = "Missing credentials"
PING_TIMEOUT_S = 60.0  # the preflight request; a run's own requests use timeout_s


_litellm = litellm_module  # imported lazily, with the local price map

# Called with (model, piece of the answer, attempt) as pieces arrive; a retry starts again.
TextSink = Callable[[str, str, int], None]


@dataclass(frozen=True)
class Completion:
    """One answered call: the text, the provider's own reasoning (if any), what it cost."""

    text: str
    reasoning: str
    call: LLMCall


class LLMError(Exception):
    """A model call that gave no answer; ``transient`` says whether retrying could help."""

    def __init__(self, message: str, transient: bool, attempts: int) -> None:
        super().__init__(message)
        self.transient = transient
        self.attempts = attempts


def is_transient(err: BaseException) -> bool:
    """Connection problems, timeouts, rate limits and server errors are worth retrying."""
    if _NO_CREDENTIALS in str(err):
        return False
    if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(err).__mro__):
        return True
    status = getattr(err, "status_code", None)
    return isinstance(status, int) and (status in _TRANSIENT_STATUS or status >= 500)


def _describe(err: BaseException) -> str:
    text = " ".join(str(err).split())
    status = getattr(err, "status_code", None)
    prefix = f"{type(err).__name__}" + (f" (HTTP {status})" if isinstance(status, int) else "")
    return f"{prefix}: {text[:600]}"


class LLMGenerator:
    """Candidates from language models through litellm.

    Args:
        models: the ``inference`` entries; one is sampled per proposal by ``weight``.
        use_feedback_llm: condense long evaluation logs with one call to the first model.
        backoff_s: first retry delay; doubles per retry (with jitter) up to ``max_backoff_s``.
        sleep: injectable for tests.
    """

    name = "llm"

    def __init__(self, models: list[ModelConfig], use_feedback_llm: bool = False,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not models:
            raise ValueError("LLMGenerator needs at least one model under `inference`")
        self._models = list(models)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._jitter = random.Random()
        complete = self._feedback_complete if use_feedback_llm else None
        self.condenser = LogCondenser(complete=complete)
        _litellm()  # fail early (at build time) if litellm is missing

    @property
    def models(self) -> list[str]:
        return [m.model for m in self._models]

    def supports(self, task: Task, probe: TaskProbe, backend: str) -> str | None:
        if backend not in ("triton", "cuda"):
            return f"The LLM generator writes triton or cuda kernels, not {backend!r}."
        return None

    def pick(self, rng: random.Random) -> ModelConfig:
        """One model of the ensemble, drawn by weight."""
        return rng.choices(self._models, weights=[m.weight for m in self._models])[0]

    def preflight(self) -> str | None:
        """None when every model's key is set and its service answers; else what to fix."""
        seen = set()
        for cfg in self._models:
            if (cfg.model, cfg.api_base, cfg.api_key_env) in seen:
                continue
            seen.add((cfg.model, cfg.api_base, cfg.api_key_env))
            problem = self._missing_key(cfg) or self._ping(cfg)
            if problem:
                return problem
        return None

    def _missing_key(self, cfg: ModelConfig) -> str | None:
        if cfg.api_key_env:
            if os.environ.get(cfg.api_key_env):
                return None
            return (f"{cfg.model}: the environment variable {cfg.api_key_env} (its api_key_env) "
                    "is not set: export the API key there")
        try:
            env = _litellm().validate_environment(model=cfg.model, api_base=cfg.api_base)
        except Exception:  # noqa: BLE001 - an unknown provider: the ping tells
            return None
        keys = [k for k in env.get("missing_keys") or [] if "KEY" in k]  # not *_API_BASE
        if env.get("keys_in_environment") or not keys:
            return None
        return (f"{cfg.model}: no API key: set {' or '.join(keys)}, or name the variable that "
                "holds the key with api_key_env")

    def _key_variable(self, cfg: ModelConfig) -> str:
        if cfg.api_key_env:
            return cfg.api_key_env
        try:
            provider = _litellm().get_llm_provider(cfg.model, api_base=cfg.api_base)[1]
        except Exception:  # noqa: BLE001
            return "its API key variable"
        return f"{provider.upper()}_API_KEY"

    def _ping(self, cfg: ModelConfig) -> str | None:
        """A one-token request: does the service answer, and accept the key?"""
        try:
            self.complete(cfg, "Reply with OK.", purpose="preflight", max_tokens=1,
                          timeout_s=min(cfg.timeout_s, PING_TIMEOUT_S))
        except LLMError as err:
            status = getattr(err.__cause__, "status_code", None)
            where = f" at {cfg.api_base}" if cfg.api_base else ""
            if _NO_CREDENTIALS in str(err):
                return (f"{cfg.model}: no API key: set {self._key_variable(cfg)}, or name the "
                        "variable that holds the key with api_key_env")
            if status in (401, 403):
                return (f"{cfg.model}{where} refused the API key in {self._key_variable(cfg)} "
                        f"({err})")
            if status == 404:
                return (f"{cfg.model}{where}: no such model or endpoint ({err}); check `model` "
                        "and `api_base`")
            if err.transient:
                return (f"{cfg.model} cannot be reached{where} (after {err.attempts} attempts: "
                        f"{err})")
            # Any other refusal (a 400 about the one-token request itself): the service is
            # there and answers; the run's own requests will say more.
        return None

    def complete(self, cfg: ModelConfig, prompt: str, *, purpose: str = "generate",
                 on_text: TextSink | None = None, max_tokens: int | None = None,
                 timeout_s: float | None = None) -> Completion:
        """One chat completion with retries, streamed when ``cfg.stream``; ``max_tokens`` and
        ``timeout_s`` override the model's (the preflight's one-token request).

        Raises:
            LLMError: no answer (after the retries a transient error allows).
        """
        litellm = _litellm()
        messages = [{"role": "user", "content": prompt}]
        kwargs = dict(model=cfg.model, messages=messages, temperature=cfg.temperature,
                      max_tokens=max_tokens or cfg.max_tokens, timeout=timeout_s or cfg.timeout_s,
                      num_retries=0, max_retries=0)
        if cfg.stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise LLMError(f"the environment variable {cfg.api_key_env} (api_key_env of "
                               f"{cfg.model}) is not set", transient=False, attempts=0)
            kwargs["api_key"] = key
        attempt = 0
        start = time.perf_counter()
        while True:
            attempt += 1
            try:
                response = litellm.completion(**kwargs)
                if cfg.stream:  # a stream that breaks off is retried like a failed call
                    response = self._gather(litellm, response, messages, cfg.model, on_text,
                                            attempt)
                break
            except Exception as err:  # noqa: BLE001 - classified below, never lost
                transient = is_transient(err)
                if not transient or attempt > cfg.num_retries:
                    raise LLMError(_describe(err), transient, attempt) from err
                delay = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
                self._sleep(delay * self._jitter.uniform(0.5, 1.0))
        latency = time.perf_counter() - start
        text, reasoning = "", ""
        if response is not None and response.choices:
            message = response.choices[0].message
            text = message.content or ""  # empty at finish_reason "length": extraction says so
            reasoning = getattr(message, "reasoning_content", None) or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        cost, source = price_call(cfg, prompt_tokens, completion_tokens)
        call = LLMCall(model=cfg.model, purpose=purpose, prompt_tokens=prompt_tokens,
                       completion_tokens=completion_tokens, cost_usd=cost, price=source,
                       latency_s=latency, attempts=attempt)
        return Completion(text, reasoning, call)

    @staticmethod
    def _gather(litellm, stream, messages, model: str, on_text: TextSink | None, attempt: int):
        """Read a stream to its end, passing each piece on; the whole response, usage included
        (the server's, or litellm's count when the server sends none)."""
        chunks = []
        for chunk in stream:
            chunks.append(chunk)
            delta = chunk.choices[0].delta.content if chunk.choices else None
            if delta and on_text is not None:
                on_text(model, delta, attempt)
        return litellm.stream_chunk_builder(chunks, messages=messages) if chunks else None

    def _feedback_complete(self, prompt: str) -> tuple[str, LLMCall]:
        done = self.complete(self._models[0], prompt, purpose="feedback")
        return done.text, done.call

    def propose(self, request: ProposalRequest) -> Proposal:
        """Sample a model, build the prompt, call it, extract the kernel."""
        cfg = self.pick(request.rng)
        calls: list[LLMCall] = []
        notes: list[str] = []

        def condense(log: str) -> str:
            text, spent, note = self.condenser.condense(log)
            if isinstance(spent, LLMCall):
                calls.append(spent)
            if note:
                notes.append(f"evaluation log {note}")
            return text

        prompt = build_prompt(request, condense=condense)
        start = time.perf_counter()
        try:
            done = self.complete(cfg, prompt, on_text=request.on_text)
        except LLMError as err:
            how = (f"after {err.attempts} attempts" if err.transient
                   else "not retried (not a transient error)")
            log = f"generation failed ({cfg.model}), {how}: {err}"
            return Proposal(code="", prompt=prompt, answer="", model=cfg.model, origin="llm",
                            description="generation failed: the model's service gave no answer",
                            log=log, failed="service", tokens_used=sum(c.tokens for c in calls),
                            calls=calls,
                            latency_s=time.perf_counter() - start)
        calls.append(done.call)
        extraction = extract_code(done.text)
        if done.call.attempts > 1:
            notes.append(f"answered after {done.call.attempts} attempts")
        log = "\n".join(filter(None, [extraction.log] + notes))
        reasoning = "\n\n".join(filter(None, [done.reasoning.strip(), extraction.reasoning]))
        return Proposal(code=extraction.code, prompt=prompt, answer=done.text, model=cfg.model,
                        origin="llm", description=extraction.description, reasoning=reasoning,
                        log=log, failed="" if extraction.code.strip() else "no_code",
                        tokens_used=sum(c.tokens for c in calls), calls=calls,
                        latency_s=done.call.latency_s)
