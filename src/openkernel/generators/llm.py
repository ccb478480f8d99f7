"""The LLM generator: litellm with any model string, an ensemble sampled by weight.

litellm is imported on first use (with its price map kept local: no network at import), so
the engine imports without it. Retries are ours rather than litellm's ``num_retries``: that
path delegates to the provider SDK's own retry loop, whose backoff cannot be set per call and
differs between providers; here transient failures (connection errors, timeouts, 408/409/429,
5xx) are retried ``ModelConfig.num_retries`` times with jittered exponential backoff, never
sooner than a server's ``Retry-After``, and everything else (401, 400) fails at once
(``outages``).

Before the first candidate, :meth:`LLMGenerator.preflight` checks that each model's key is set
and that its service answers a one-token request: a model that cannot be reached stops the run
with one message naming the model and the variable. A failure later in the run is a generation
failure of that candidate (``Proposal.failed``): a Proposal with empty code and a log that says
why, stored as such, and the search goes on; once a model's calls fail
``max_consecutive_failures`` times in a row it is paused, and with every model paused
:attr:`LLMGenerator.outage` says why the run stops.

Answers are streamed by default (``ModelConfig.stream``): ``ProposalRequest.on_text`` gets each
piece as it arrives (kernel-code shows it in the chat); ``timeout_s`` bounds the whole answer.
Every answered call comes back as a typed ``LLMCall`` (tokens in and out, cost, where the price
came from: see ``costs``; counts litellm made because the server sent none are marked
``estimated``), and so do the tokens of a stream cut off mid-answer.
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
from openkernel.generators.outages import (
    MAX_RETRY_AFTER_S,
    NO_CREDENTIALS,
    LLMError,
    ModelHealth,
    describe,
    http_status,
    is_transient,
    retry_after,
)
from openkernel.generators.prompt import build_prompt
from openkernel.generators.streaming import TextSink, Usage, count_tokens, gather
from openkernel.records import TaskProbe
from openkernel.redaction import add_secret, redact
from openkernel.task import Task

PING_TIMEOUT_S = 60.0  # the preflight request; a run's own requests use timeout_s

_litellm = litellm_module  # imported lazily, with the local price map


@dataclass(frozen=True)
class Completion:
    """One answered call: the text, the provider's own reasoning (if any), what it cost."""

    text: str
    reasoning: str
    call: LLMCall


class LLMGenerator:
    """Candidates from language models through litellm.

    Args:
        models: the ``inference`` entries; one is sampled per proposal by ``weight``.
        use_feedback_llm: condense long evaluation logs with one call to the first model.
        backoff_s: first retry delay; doubles per retry (with jitter) up to ``max_backoff_s``;
            never shorter than a server's ``Retry-After``.
        sleep, clock: injectable for tests (a fake clock: no real waiting).
    """

    name = "llm"

    def __init__(self, models: list[ModelConfig], use_feedback_llm: bool = False,
                 backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not models:
            raise ValueError("LLMGenerator needs at least one model under `inference`")
        self._models = list(models)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._clock = clock
        self._jitter = random.Random()
        self.health = ModelHealth(self._models)
        for cfg in self._models:  # whatever the variable is called, its value is never stored
            add_secret(os.environ.get(cfg.api_key_env or ""))
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
        """One model of the ensemble, drawn by weight among those not paused."""
        models = self.health.active() or self._models
        return rng.choices(models, weights=[m.weight for m in models])[0]

    @property
    def outage(self) -> str:
        """Why no model can be asked any more ("" while one can): the run stops there."""
        return self.health.outage

    def take_notices(self) -> list[str]:
        """Models paused since the last call (an ensemble goes on with the others)."""
        return self.health.take_notices()

    def preflight(self) -> str | None:
        """None when every model's key is set and its service answers; else what to fix."""
        seen = set()
        for cfg in self._models:
            if (cfg.model, cfg.api_base, cfg.api_key_env) in seen:
                continue
            seen.add((cfg.model, cfg.api_base, cfg.api_key_env))
            problem = self._missing_key(cfg) or self._ping(cfg)
            if problem:
                return redact(problem)
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
            status = http_status(err.__cause__) if err.__cause__ is not None else None
            where = f" at {cfg.api_base}" if cfg.api_base else ""
            if NO_CREDENTIALS in str(err):
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
        ``timeout_s`` override the model's (the preflight's one-token request). Counts towards
        the model's consecutive failures (``health``) unless it is the preflight.

        Raises:
            LLMError: no answer (after the retries a transient error allows).
        """
        try:
            done = self._complete(cfg, prompt, purpose, on_text, max_tokens, timeout_s)
        except LLMError as err:
            if purpose != "preflight":
                self.health.failed(cfg, str(err))
            raise
        self.health.ok(cfg)
        return done

    def _complete(self, cfg: ModelConfig, prompt: str, purpose: str, on_text: TextSink | None,
                  max_tokens: int | None, timeout_s: float | None) -> Completion:
        litellm = _litellm()
        messages = [{"role": "user", "content": prompt}]
        timeout = timeout_s or cfg.timeout_s
        kwargs = dict(model=cfg.model, messages=messages, temperature=cfg.temperature,
                      max_tokens=max_tokens or cfg.max_tokens, timeout=timeout,
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
            add_secret(key)
            kwargs["api_key"] = key
        attempt = 0
        start = time.perf_counter()
        used = Usage()  # tokens of streams cut off before this attempt
        while True:
            attempt += 1
            pieces: list[str] = []
            deadline = self._clock() + timeout
            try:
                response, served = litellm.completion(**kwargs), True
                if cfg.stream:  # a stream that breaks off is retried like a failed call
                    response, served = gather(litellm, response, messages, cfg.model, on_text,
                                              attempt, pieces, deadline, self._clock)
                break
            except Exception as err:  # noqa: BLE001 - classified below, never lost
                if pieces:  # the server sent part of an answer: those tokens were spent
                    used.add(*count_tokens(litellm, cfg.model, messages, "".join(pieces)), True)
                transient = is_transient(err)
                wait = retry_after(err)
                if not transient or attempt > cfg.num_retries or (
                        wait is not None and wait > MAX_RETRY_AFTER_S):
                    spent = self._call(cfg, purpose, used, time.perf_counter() - start,
                                       attempt) if used.prompt else None
                    message = describe(err, timeout)
                    if wait is not None and wait > MAX_RETRY_AFTER_S:
                        message += f" (the server asked to retry after {wait:.0f} s)"
                    raise LLMError(message, transient, attempt, spent) from err
                delay = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
                self._sleep(max(delay * self._jitter.uniform(0.5, 1.0), wait or 0.0))
        text, reasoning = "", ""
        if response is not None and response.choices:
            message = response.choices[0].message
            text = message.content or ""  # empty at finish_reason "length": extraction says so
            reasoning = getattr(message, "reasoning_content", None) or ""
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        if not prompt_tokens and not completion_tokens and response is not None:
            served = False  # no usage at all: count them ourselves
            prompt_tokens, completion_tokens = count_tokens(litellm, cfg.model, messages, text)
        used.add(prompt_tokens, completion_tokens, not served)
        return Completion(text, reasoning,
                          self._call(cfg, purpose, used, time.perf_counter() - start, attempt))

    @staticmethod
    def _call(cfg: ModelConfig, purpose: str, used: Usage, latency: float,
              attempts: int) -> LLMCall:
        cost, source = price_call(cfg, used.prompt, used.completion)
        return LLMCall(model=cfg.model, purpose=purpose, prompt_tokens=used.prompt,
                       completion_tokens=used.completion, cost_usd=cost, price=source,
                       latency_s=latency, attempts=attempts, estimated=used.estimated)

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
            if err.spent is not None:  # a stream cut off mid-answer: its tokens count
                calls.append(err.spent)
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
                        compile_error=extraction.error,
                        tokens_used=sum(c.tokens for c in calls), calls=calls,
                        latency_s=done.call.latency_s)

