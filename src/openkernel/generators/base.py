"""What every generator takes and gives back."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

from openkernel.costs import LLMCall
from openkernel.records import Diagnosis, TaskProbe
from openkernel.schemas import Program
from openkernel.task import Task


@dataclass
class ProposalRequest:
    """Everything a generator may use to write the next candidate."""

    task: Task
    probe: TaskProbe
    backend: str  # "triton" | "cuda"
    iteration: int
    branch: int
    parent: Program | None  # sampled from the archive; its eval result and log included
    best: Program | None  # best kernel so far
    inspirations: list[Program] = field(default_factory=list)
    user_instructions: str = ""  # task's USER_INSTRUCTIONS + config + live steering
    hardware_label: str = ""
    rng: random.Random = field(default_factory=random.Random)
    # The critic's latest diagnoses this proposal should read: the best kernel's, then the
    # parent's when the parent is another kernel (prompt section "Critic's diagnosis").
    diagnoses: tuple[Diagnosis, ...] = ()
    # Gets each piece of a streamed answer as it arrives: (model, text, attempt); a piece of a
    # new attempt (a retry) starts the answer again.
    on_text: Callable[[str, str, int], None] | None = None
    # Parameter combinations this job has judged already, as (template, sorted params) keys
    # (``param_key``): the offline generator proposes none of them while others remain.
    judged: frozenset = frozenset()
    max_variants: int = 16  # prompt.max_template_combinations: the most a sweep may hold
    allow_templated: bool = False  # prompt.allow_templated: the model may answer with a template
    # This branch's own recent failures (most recent first, the parent left out): their
    # condensed logs and code join the prompt so the model does not repeat them.
    failures: list[Program] = field(default_factory=list)
    # The reference's median runtime on this hardware in ms (0: not timed yet) and how it was
    # measured; the prompt gives it when the parent is the reference.
    reference_ms: float = 0.0
    reference_timing: str = ""


@dataclass
class Proposal:
    """A generator's answer. ``code`` is empty when nothing usable came back (see ``log``)."""

    code: str
    prompt: str
    answer: str
    model: str
    origin: str  # "llm" | "offline"
    description: str = ""  # one line: what this candidate tries
    reasoning: str = ""  # the model's plan / diagnosis, for the chat panel
    log: str = ""  # extraction or generation problems
    # Set when no kernel came back because generating failed: "service" (the model's service
    # answered with an error, after any retries) or "no_code" (the answer held no kernel); or
    # "exhausted": the generator has nothing untried left to propose (the job ends there).
    failed: str = ""
    # The code came back but is no valid module (it does not parse, or defines no ModelNew):
    # the parser's message and line. The candidate is stored with its code as a compile error.
    compile_error: str = ""
    tokens_used: int = 0
    latency_s: float = 0.0
    calls: list[LLMCall] = field(default_factory=list)  # every answered model call it made
    # Template tunables (offline): {"template": NAME, TUNABLE: value, ...}. The search loop
    # stores them in Program.metadata["params"]; the offline generator reads a parent's (and
    # inspirations') params from there to mutate and recombine them.
    params: dict = field(default_factory=dict)
    # A templated candidate's combinations as concrete code (templating.Variant), when the
    # generator instantiated them itself (the offline generator's sweep); an LLM's template
    # is instantiated by the engine from the code's TEMPLATE_PARAMS instead.
    variants: list = field(default_factory=list)
    # How each GEMM or convolution computes, per point of the sweep (the offline generator's):
    # [(params, [records.KernelPrecision, ...]), ...]; see ``precision_of``.
    precision: list = field(default_factory=list)


class Generator(Protocol):
    name: str  # "llm" | "offline"

    @property
    def models(self) -> list[str]: ...

    def supports(self, task: Task, probe: TaskProbe, backend: str) -> str | None:
        """None when it can write candidates for this task; otherwise the plain reason why not."""

    def preflight(self) -> str | None:
        """None when it can generate at all (its models answer); otherwise one message naming
        what to fix. Called once, before the run's first candidate."""

    def propose(self, request: ProposalRequest) -> Proposal: ...


def precision_of(proposal: Proposal, params: dict) -> list[dict]:
    """``Program.metadata["precision"]``: the records of the point the program was kept at
    (a sweep's winner), as dicts; empty when the generator recorded none."""
    key = param_key("", params or {})
    for point, records in proposal.precision:
        if param_key("", point) == key:
            return [asdict(r) for r in records]
    return []


def param_key(template: str, params: dict) -> tuple:
    """How a judged combination of a template's parameters is remembered."""
    return (template, tuple(sorted((k, v) for k, v in params.items() if k != "template")))
