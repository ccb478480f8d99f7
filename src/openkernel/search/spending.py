"""A job's model calls during a search: counted, stored, checked against the budget.

The candidates' threads add their calls as soon as they come back, so a budget reached by one
is seen by the next before it starts; a call starts only while the spend so far plus the calls
in flight and this one, each as dear as the dearest so far, stay within the budget (so the
budget is passed by no more than the calls in flight when it was reached), and the reason
stored at the end carries the true total. The search's own thread stores the calls (it is the
only writer of the database). Streamed answers are passed on in pieces, a few a second per
branch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from openkernel.config import Config, ModelConfig
from openkernel.costs import Ledger, LLMCall, Spend, price_source
from openkernel.events import AnswerStreamed, BudgetReached, ModelCalled
from openkernel.store import Store

STREAM_INTERVAL_S = 0.1  # pieces of a streamed answer are passed on at most this often


class AnswerStream:
    """Collects the pieces of one streamed answer (``ProposalRequest.on_text``) and passes them
    on as AnswerStreamed events at most every STREAM_INTERVAL_S (a model sends dozens a
    second)."""

    def __init__(self, label: str, put: Callable[[object], None]) -> None:
        self.label, self._put = label, put
        self._pieces: list[str] = []
        self._model, self._attempt, self._last = "", 1, 0.0

    def __call__(self, model: str, text: str, attempt: int) -> None:
        if attempt != self._attempt:
            self.flush()
        self._model, self._attempt = model, attempt
        self._pieces.append(text)
        if time.monotonic() - self._last >= STREAM_INTERVAL_S:
            self.flush()

    def flush(self) -> None:
        if self._pieces:
            self._put(AnswerStreamed(self.label, self._model, "".join(self._pieces),
                                     self._attempt))
            self._pieces = []
        self._last = time.monotonic()


def call_summary(calls: list[LLMCall]) -> dict:
    """What a candidate's model calls used, for its stored metadata (``metadata.llm``)."""
    prices = {c.price for c in calls}
    return {"calls": len(calls), "prompt_tokens": sum(c.prompt_tokens for c in calls),
            "completion_tokens": sum(c.completion_tokens for c in calls),
            "cost_usd": sum(c.cost_usd for c in calls),
            "estimated": sum(c.estimated for c in calls),  # calls counted by litellm
            "price": prices.pop() if len(prices) == 1 else ("mixed" if prices else "")}


def stored_ledger(store: Store, task_name: str, job_name: str) -> Ledger:
    """A job's answered model calls as stored (a resumed job: all its runs), totalled."""
    ledger = Ledger()
    for row in store.job_llm_calls(task_name, job_name):
        ledger.add(LLMCall(row.model, row.purpose, row.prompt_tokens, row.completion_tokens,
                           row.cost_usd, row.price, row.latency_s, row.attempts,
                           bool(row.estimated)))
    return ledger


class Spending:
    """The job's ledger (its earlier runs' calls included) and its budget."""

    def __init__(self, config: Config, store: Store, task_name: str, job_name: str) -> None:
        self.config, self.store = config, store
        self.task_name, self.job_name = task_name, job_name
        self.ledger = stored_ledger(store, task_name, job_name)
        self.reason = ""  # set once a budget is reached: no new candidate starts
        self._lock = threading.Lock()
        self._in_flight = 0  # model calls started and not yet come back

    def snapshot(self) -> Spend:
        return self.ledger.snapshot()

    def add(self, call: LLMCall, label: str, iteration: int,
            kernel_id: str | None = None) -> ModelCalled:
        """Count one call (from any thread); the event to pass on."""
        self.ledger.add(call)
        return ModelCalled(label, iteration, call, self.ledger.snapshot(), kernel_id)

    def check(self, put: Callable[[object], None], pending: int = 0) -> None:
        """Once the job's spend reaches a limit (or, with ``pending`` calls about to start,
        could pass it), say so (once): no new candidate starts."""
        with self._lock:
            self._check(put, pending)

    def _check(self, put: Callable[[object], None], pending: int) -> None:
        if self.reason:
            return
        reason = self.ledger.over_budget(self.config.budget, pending)
        if reason:
            self.reason = reason
            put(BudgetReached(reason + "; no new candidate starts, those in flight finish",
                              self.ledger.snapshot()))

    def begin(self, put: Callable[[object], None]) -> bool:
        """Before a model call: True (and it counts as in flight until :meth:`end`) while the
        spend, the calls in flight and this one stay within the budget; else False, said once."""
        with self._lock:
            self._check(put, self._in_flight + 1)
            if self.reason:
                return False
            self._in_flight += 1
            return True

    def end(self) -> None:
        """A call begun with :meth:`begin` came back (answered or not)."""
        with self._lock:
            self._in_flight -= 1

    def spent(self) -> bool:
        """Whether the next call could pass the budget (a resumed job's included): then no
        call is made at all, not even the preflight."""
        return self.ledger.over_budget(self.config.budget, pending=1) is not None

    def final_reason(self) -> str:
        """The budget's reason with the job's true total at the end ("" if none stopped it)."""
        if not self.reason:
            return ""
        key = self.reason.split(" ", 1)[0]
        return self.ledger.over_budget(self.config.budget, pending=1 << 30, only=key) or self.reason

    def warnings(self) -> list[str]:
        """What the user should know before the first call: prices a max_usd cannot see."""
        if self.config.budget.max_usd is None:
            return []
        models: list[ModelConfig] = list(self.config.inference)
        if self.config.critic_model is not None:
            models.append(self.config.critic_model)
        unpriced = sorted({m.model for m in models if price_source(m) == "unknown"})
        if not unpriced:
            return []
        return [f"budget.max_usd: no price known for {', '.join(unpriced)}; its calls count $0 "
                "(set a local price under its inference entry: price.input_usd_per_mtok, "
                "price.output_usd_per_mtok)"]

    def store_call(self, run_id: int, event: ModelCalled) -> None:
        """Write one call to ``llm_calls`` (the search's thread only)."""
        call = event.call
        self.store.add_llm_call(
            run_id=run_id, task_name=self.task_name, job_name=self.job_name,
            iteration=event.iteration, kernel_id=event.kernel_id, label=event.label,
            model=call.model, purpose=call.purpose, prompt_tokens=call.prompt_tokens,
            completion_tokens=call.completion_tokens, cost_usd=call.cost_usd, price=call.price,
            latency_s=call.latency_s, attempts=call.attempts, estimated=call.estimated)
