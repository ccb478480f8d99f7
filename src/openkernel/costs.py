"""What model calls cost: tokens and US dollars per call, summed per model and per job.

A call's price comes from the model's local entry in the config (``inference[].price``, for
self-hosted models) when it has one, else from litellm's own price map (kept local: no
network). A model neither knows costs $0 and is labelled "unknown", never guessed, so a total
that includes such calls says so.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

from openkernel.config import BudgetConfig, ModelConfig

PRICE_SOURCES = ("config", "litellm", "unknown")


def litellm_module():
    """litellm, imported on first use with its price map kept local and its banners off."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.drop_params = True  # a provider that lacks a parameter should not fail the call
    return litellm


def price_call(cfg: ModelConfig, prompt_tokens: int, completion_tokens: int) -> tuple[float, str]:
    """(US dollars, where the price came from: "config" | "litellm" | "unknown")."""
    if cfg.price is not None:
        usd = (prompt_tokens * cfg.price.input_usd_per_mtok
               + completion_tokens * cfg.price.output_usd_per_mtok) / 1e6
        return usd, "config"
    try:
        prompt_usd, completion_usd = litellm_module().cost_per_token(
            model=cfg.model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    except Exception:  # noqa: BLE001 - litellm raises for models its map does not hold
        return 0.0, "unknown"
    return float(prompt_usd) + float(completion_usd), "litellm"


def price_source(cfg: ModelConfig) -> str:
    """Where this model's price would come from, asked before any call is made."""
    return price_call(cfg, 1000, 1000)[1]


def format_usd(usd: float) -> str:
    """``$12.34``; below a dollar up to four decimals (small runs cost fractions of a cent):
    ``$0.50``, ``$0.0186``; ``<$0.0001`` for less."""
    if usd >= 1:
        return f"${usd:,.2f}"
    if 0 < usd < 0.0001:
        return "<$0.0001"
    text = f"{usd:.4f}".rstrip("0")
    return "$" + text + "0" * max(0, 2 - len(text.split(".")[1]))


def format_tokens(n: int) -> str:
    """``812``, ``12.3k``, ``4.56M``."""
    if n < 1000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1e3:.1f}k"
    return f"{n / 1e6:.2f}M"


@dataclass(frozen=True)
class LLMCall:
    """One model call that returned an answer (failed calls cost nothing and are not counted)."""

    model: str
    purpose: str  # "generate" | "critic" | "feedback" ("preflight": the one-token check, not stored)
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    price: str  # "config" | "litellm" | "unknown"
    latency_s: float = 0.0
    attempts: int = 1
    # The token counts are litellm's count, not the server's: the server sent no usage, or a
    # stream was cut off before its usage came.
    estimated: bool = False

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class ModelSpend:
    """The calls of one model in a job, all purposes together."""

    model: str
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced_calls: int = 0  # calls whose price was unknown (counted at $0)
    purposes: dict[str, int] = field(default_factory=dict)  # purpose -> calls
    estimated_calls: int = 0  # calls whose tokens were counted by litellm, not the server

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, call: LLMCall) -> None:
        self.calls += 1
        self.prompt_tokens += call.prompt_tokens
        self.completion_tokens += call.completion_tokens
        self.cost_usd += call.cost_usd
        self.unpriced_calls += call.price == "unknown"
        self.purposes[call.purpose] = self.purposes.get(call.purpose, 0) + 1
        self.estimated_calls += call.estimated


@dataclass(frozen=True)
class Spend:
    """A job's model calls so far: totals and one ModelSpend per model."""

    models: tuple[ModelSpend, ...] = ()

    @property
    def calls(self) -> int:
        return sum(m.calls for m in self.models)

    @property
    def prompt_tokens(self) -> int:
        return sum(m.prompt_tokens for m in self.models)

    @property
    def completion_tokens(self) -> int:
        return sum(m.completion_tokens for m in self.models)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_usd(self) -> float:
        return sum(m.cost_usd for m in self.models)

    @property
    def unpriced_calls(self) -> int:
        return sum(m.unpriced_calls for m in self.models)

    @property
    def estimated_calls(self) -> int:
        return sum(m.estimated_calls for m in self.models)

    def cost_text(self) -> str:
        """``$0.0123``, with ``+ unknown`` when some calls had no price."""
        text = format_usd(self.cost_usd)
        if self.unpriced_calls:
            text += f" + unknown ({self.unpriced_calls} calls unpriced)"
        return text


class Ledger:
    """Running totals of a job's calls; thread-safe (candidates generate in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: dict[str, ModelSpend] = {}
        self.largest_usd = 0.0  # the dearest call so far: what the next one may cost
        self.largest_tokens = 0

    def add(self, call: LLMCall) -> None:
        with self._lock:
            self._models.setdefault(call.model, ModelSpend(call.model)).add(call)
            self.largest_usd = max(self.largest_usd, call.cost_usd)
            self.largest_tokens = max(self.largest_tokens, call.tokens)

    def snapshot(self) -> Spend:
        with self._lock:
            return Spend(tuple(ModelSpend(m.model, m.calls, m.prompt_tokens, m.completion_tokens,
                                          m.cost_usd, m.unpriced_calls, dict(m.purposes),
                                          m.estimated_calls)
                               for m in self._models.values()))

    def over_budget(self, budget: BudgetConfig, pending: int = 0, only: str = "") -> str | None:
        """Why the budget stops the job now, or None while it may go on. With ``pending``
        calls about to start (those in flight and the next), it stops too when they could
        pass a limit, each costing as much as the dearest call so far. ``only``: one limit's
        key (``budget.max_usd``), for its text with the totals now."""
        spend = self.snapshot()
        limits = (("budget.max_usd", budget.max_usd, spend.cost_usd, self.largest_usd, format_usd,
                   "spent"),
                  ("budget.max_tokens", budget.max_tokens, spend.tokens, self.largest_tokens,
                   lambda n: f"{n:,} tokens", "used"))
        for key, cap, used, largest, show, verb in limits:
            if cap is None or (only and key != only):
                continue
            total = f"{show(used)} {verb} of {show(cap).removesuffix(' tokens')}"
            if used >= cap:
                return f"{key} reached: {total}"
            if pending and used + pending * largest >= cap:
                return (f"{key} nearly reached: {total}, and the next call could pass it (one "
                        f"call has {verb} up to {show(largest)})")
        return None
