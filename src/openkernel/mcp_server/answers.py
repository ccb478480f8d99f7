"""The typed records the MCP tools return (their output schemas), built from the engine's own.

Every answer names the database it read or wrote (``database``): an agent never has to guess
where the results went.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from openkernel.schemas import EvalResult, Status
from openkernel.store.tables import Kernel


def _ratio(value: float | None) -> float | None:
    return round(value, 4) if value is not None and value > 0 else None


class Verdict(BaseModel):
    """What the evaluator said about a kernel (``evaluate``)."""

    database: str = Field(description="The results database (reference timings are cached there).")
    status: str = Field(description="faster, correct, incorrect, test_timeout, compile_error, "
                        "build_timeout, not_run or evaluator_fault")
    meaning: str = Field(description="The status in words.")
    correct: bool = Field(description="It matched the reference on every seed and held-out shape.")
    speedup: float | None = Field(description="Reference (eager PyTorch) time over its time; "
                                  "None when not timed.")
    speedup_over_compile: float | None = Field(description="The same against torch.compile.")
    runtime_ms: float | None = Field(description="Median runtime in ms; None when not timed.")
    hardware: str = Field(description="What it ran on (CPU timings under the Triton "
                          "interpreter only rank kernels roughly).")
    profile: dict = Field(description="Profile summary: Nsight Compute metrics on a GPU, or an "
                          "analytic estimate labelled as one; empty when none.")
    eval_log: str = Field(description="The evaluation log: build errors, mismatches, timings.")

    @classmethod
    def of(cls, result: EvalResult, database: str, hardware: str) -> "Verdict":
        status: Status = result.get_status()
        return cls(database=database, status=status.value, meaning=status.label,
                   correct=bool(result.correctness), speedup=_ratio(result.runtime_improvement),
                   speedup_over_compile=_ratio(result.improve_over_compile),
                   runtime_ms=result.runtime if result.runtime > 0 else None, hardware=hardware,
                   profile=dict(result.profiler_data or {}), eval_log=result.eval_log)


class KernelInfo(BaseModel):
    """One stored kernel (``show_kernel``, ``best_kernel``, ``submit``)."""

    database: str
    id: str
    label: str = Field(description="i<N>-b<M> (the generator's), u<N> (a person's or an "
                       "agent's), ref or start")
    task: str
    job: str
    author: str = Field(description="'user', 'agent:<name>', or '' for the generator's own")
    origin: str = Field(description="llm, offline, user, agent, reference, file or best")
    parent_id: str | None
    status: str
    meaning: str
    correct: bool
    speedup: float | None
    speedup_over_compile: float | None
    runtime_ms: float | None
    description: str
    code: str
    eval_log: str

    @classmethod
    def of(cls, row: Kernel, database: str) -> "KernelInfo":
        status = Status(row.status)
        return cls(database=database, id=row.id, label=row.label, task=row.task_name,
                   job=row.job_name, author=row.author or "", origin=row.origin,
                   parent_id=row.parent_id, status=status.value, meaning=status.label,
                   correct=bool(row.correctness), speedup=_ratio(row.runtime_improvement),
                   speedup_over_compile=_ratio(row.improve_over_compile),
                   runtime_ms=row.runtime if row.runtime and row.runtime > 0 else None,
                   description=row.description or "", code=row.code or "",
                   eval_log=row.eval_log or "")


class JobStatus(BaseModel):
    """A search (or a suite) and how far it got."""

    database: str
    task: str = Field(description="The task name ('' for a suite of several).")
    job: str
    kind: str = Field(description="search or suite")
    state: str = Field(description="starting, running, completed, stopped, failed or "
                       "interrupted")
    iteration: int = Field(description="The iteration in progress (-1 before the first).")
    max_iters: int
    judged: int = Field(description="Candidates judged so far (of this server's run; for a "
                        "job read from the database, all stored).")
    best_speedup: float | None
    best_kernel_id: str | None
    best_label: str
    recent: list[str] = Field(description="The latest verdicts and messages, oldest first.")
    error: str = Field(description="Why it failed or stopped by itself; '' otherwise.")
    model_calls: int = Field(0, description="Answered model calls of the job (its earlier "
                             "runs' too).")
    tokens: int = Field(0, description="Their prompt and completion tokens.")
    cost_usd: float = Field(0.0, description="Their cost in US dollars (calls whose price is "
                            "unknown count $0).")
    cost: str = Field("$0", description="The cost as every view says it, with '+ unknown' "
                      "when some calls had no price.")


class JobRow(BaseModel):
    task: str
    job: str
    state: str
    candidates: int
    best_speedup: float | None
    best_label: str
    best_kernel_id: str | None
    hardware: str
    last_activity: str


class RunList(BaseModel):
    """Every job in the database, live ones first (``list_runs``)."""

    database: str
    jobs: list[JobRow]
