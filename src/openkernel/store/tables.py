"""Table definitions. One row per run, one per candidate kernel (failures included), one per
critic diagnosis, one per answered model call.

A change here is an Alembic revision too (``store/migrations/versions``), which ``Store``
applies when it opens a database; readers of a database the engine has not opened since check
for columns and tables added later.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One invocation of a job; a resumed job gets a new Run row with the same job_name."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_name: Mapped[str] = mapped_column(String(200), index=True)
    job_name: Mapped[str] = mapped_column(String(200), index=True)
    __table_args__ = (Index("ix_runs_task_job", "task_name", "job_name"),)
    backend: Mapped[str] = mapped_column(String(20))
    gpu_arch: Mapped[str] = mapped_column(String(100), default="")
    hardware: Mapped[str] = mapped_column(String(200), default="")
    generator: Mapped[str] = mapped_column(String(20), default="offline")
    models: Mapped[list] = mapped_column(JSON, default=list)
    config: Mapped[dict] = mapped_column(JSON, default=dict)
    task_path: Mapped[str] = mapped_column(Text, default="")
    # running|completed|stopped|failed|interrupted; a "running" row whose engine is gone reads
    # as interrupted (openkernel.store.liveness), and is stored so when the job resumes.
    status: Mapped[str] = mapped_column(String(20), default="running")
    error: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Which engine process runs it, and when it last said it is alive (every few seconds).
    engine_host: Mapped[str] = mapped_column(String(200), default="")
    engine_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class Kernel(Base):
    """A generated (or starting) kernel and everything recorded about it."""

    __tablename__ = "kernels"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    task_name: Mapped[str] = mapped_column(String(200))
    job_name: Mapped[str] = mapped_column(String(200))
    iteration: Mapped[int] = mapped_column(Integer)
    branch: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(40))  # i<N>-b<M>
    parent_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    inspiration_ids: Mapped[list] = mapped_column(JSON, default=list)
    is_program0: Mapped[bool] = mapped_column(Boolean, default=False)
    origin: Mapped[str] = mapped_column(String(20))  # reference|file|best|llm|offline|user|agent
    model: Mapped[str] = mapped_column(String(200), default="")
    # Who wrote a candidate from outside the generator: "user" or "agent:<name>" (label u<N>,
    # origin user|agent); "" for the generator's own. Added by migration 0002_kernel_author (older rows NULL).
    author: Mapped[str | None] = mapped_column(String(100), nullable=True, default="")
    hardware: Mapped[str] = mapped_column(String(200), default="")
    gpu_arch: Mapped[str] = mapped_column(String(100), default="")
    backend: Mapped[str] = mapped_column(String(20), default="triton")
    language: Mapped[str] = mapped_column(String(20), default="python")
    description: Mapped[str] = mapped_column(Text, default="")
    prompt: Mapped[str] = mapped_column(Text, default="")
    answer: Mapped[str] = mapped_column(Text, default="")
    reference_code: Mapped[str] = mapped_column(Text, default="")
    code: Mapped[str] = mapped_column(Text, default="")
    user_instructions: Mapped[str] = mapped_column(Text, default="")  # incl. live steering
    status: Mapped[str] = mapped_column(String(20), index=True)
    compiled: Mapped[bool] = mapped_column(Boolean, default=False)
    correctness: Mapped[bool] = mapped_column(Boolean, default=False)
    runtime: Mapped[float] = mapped_column(Float, default=-1.0)  # ms, median
    runtime_stats: Mapped[dict] = mapped_column(JSON, default=dict)
    runtime_improvement: Mapped[float] = mapped_column(Float, default=-1.0)  # speedup vs eager
    improve_over_compile: Mapped[float] = mapped_column(Float, default=-1.0)
    perf_score: Mapped[int] = mapped_column(Integer, default=-1)
    score: Mapped[float] = mapped_column(Float, default=0.0)
    features: Mapped[dict] = mapped_column(JSON, default=dict)  # MAP-Elites coordinates
    profiler_data: Mapped[dict] = mapped_column(JSON, default=dict)
    # A templated candidate's every combination (params, status, runtime stats, speedup, why
    # it failed), the space, the winner; {} for any other. Added in place to older databases.
    template_results: Mapped[dict | None] = mapped_column(JSON, default=dict, nullable=True)
    meta: Mapped[dict] = mapped_column("metadata", JSON, default=dict)
    eval_log: Mapped[str] = mapped_column(Text, default="")
    generation_log: Mapped[str] = mapped_column(Text, default="")  # extraction / LLM errors
    tokens_used: Mapped[int] = mapped_column(Integer, default=0)
    generation_s: Mapped[float] = mapped_column(Float, default=0.0)
    evaluation_s: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    evaluated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    __table_args__ = (
        Index("ix_kernels_task_job", "task_name", "job_name"),
        Index("ix_kernels_task_arch_score", "task_name", "gpu_arch", "score"),
        # Covers the per-job summaries (openkernel.store.summary) without reading prompt/code:
        # the candidates' status mix, and the best (correct, highest score) by one range.
        Index("ix_kernels_job_candidates", "task_name", "job_name", "is_program0", "correctness",
              "score", "status", "runtime_improvement", "created_at"),
    )


class ReferenceTiming(Base):
    """The reference's baselines (eager, torch.compile, max-autotune; timed out ones with their
    seconds), kept per task code, hardware and software: reused by every later job, suite and
    run with the same key (``evaluation/host/baselines.py``)."""

    __tablename__ = "reference_timings"

    task_digest: Mapped[str] = mapped_column(String(32), primary_key=True)
    hardware: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20), primary_key=True)  # "compile": all baselines
    # Digest of the workers' torch/Triton/CUDA versions, backend flags and compiler settings
    # (Hardware.software); "" on rows from before it was part of the key (never reused).
    environment: Mapped[str] = mapped_column(String(64), primary_key=True, default="")
    runtime: Mapped[float] = mapped_column(Float)
    runtime_stats: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class InductorCapture(Base):
    """The code torch.compile's Inductor writes for the reference (the probe's captures, the
    offline generator's seed), kept per task code, hardware, software and TF32 flag, as the
    baselines are: reused by every later probe with the same key
    (``evaluation/host/captures.py``)."""

    __tablename__ = "inductor_captures"

    task_digest: Mapped[str] = mapped_column(String(32), primary_key=True)
    hardware: Mapped[str] = mapped_column(String(200), primary_key=True)
    environment: Mapped[str] = mapped_column(String(64), primary_key=True)  # software_key
    tf32: Mapped[bool] = mapped_column(Boolean, primary_key=True)  # eval_config.allow_tf32
    # {"format", "captures": [...], "warnings": [...]}, as the probe's worker made them
    record: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Critique(Base):
    """The critic's diagnosis of one kernel after one iteration of a job: of the best kernel
    (role "best") and of each parent handed to the next iteration (role "parent").

    Databases made before this table existed get it from ``Store`` (the baseline migration adds
    missing tables); readers of a database still without it treat it as holding no critiques.
    """

    __tablename__ = "critiques"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    task_name: Mapped[str] = mapped_column(String(200))
    job_name: Mapped[str] = mapped_column(String(200))
    iteration: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text, default="")
    source: Mapped[str] = mapped_column(String(20), default="rules")  # rules | llm
    # Added with the LLM critic (older rows: NULL / empty).
    kernel_id: Mapped[str | None] = mapped_column(String(32), nullable=True)  # None: no kernel yet
    label: Mapped[str | None] = mapped_column(String(40), nullable=True, default="")
    role: Mapped[str | None] = mapped_column(String(20), nullable=True, default="best")
    bottleneck: Mapped[str | None] = mapped_column(String(40), nullable=True, default="")
    headroom: Mapped[float | None] = mapped_column(Float, nullable=True)
    model: Mapped[str | None] = mapped_column(String(200), nullable=True, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    __table_args__ = (Index("ix_critiques_task_job", "task_name", "job_name", "iteration"),)


class LLMCallRecord(Base):
    """One answered model call: a candidate's generation or log summary, or a critic round.

    The job's costs are summed from here (per model, per candidate through ``kernel_id``), and
    a resumed job's budget counts what its earlier runs spent.
    """

    __tablename__ = "llm_calls"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    task_name: Mapped[str] = mapped_column(String(200))
    job_name: Mapped[str] = mapped_column(String(200))
    iteration: Mapped[int] = mapped_column(Integer)
    kernel_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    label: Mapped[str] = mapped_column(String(40), default="")  # i<N>-b<M>; "" for the critic
    model: Mapped[str] = mapped_column(String(200))
    purpose: Mapped[str] = mapped_column(String(20))  # generate | feedback | critic
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)
    price: Mapped[str] = mapped_column(String(20), default="unknown")  # config|litellm|unknown
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The tokens are litellm's count, not the server's (no usage sent, or a stream cut off).
    estimated: Mapped[bool] = mapped_column(Boolean, default=False)

    __table_args__ = (Index("ix_llm_calls_task_job", "task_name", "job_name"),)


class SuiteProblem(Base):
    """One problem of a benchmark suite (``openkernel bench``): which job judged it.

    A suite is a name shared by the jobs of its problems (each problem's job is named after the
    suite, so re-running the suite resumes every job); this table keeps the order, the file
    and the task's digest (which keys its reference timings).
    """

    __tablename__ = "suite_problems"

    suite: Mapped[str] = mapped_column(String(200), primary_key=True)
    task_name: Mapped[str] = mapped_column(String(200), primary_key=True)
    job_name: Mapped[str] = mapped_column(String(200))
    position: Mapped[int] = mapped_column(Integer, default=0)
    path: Mapped[str] = mapped_column(Text, default="")
    task_digest: Mapped[str] = mapped_column(String(32), default="")
    # How the problem's last attempt ended, also when no run was started (a task the
    # generator refuses, a probe that failed): the reason is kept here.
    outcome: Mapped[str] = mapped_column(String(20), default="")  # ... | timed_out
    error: Mapped[str] = mapped_column(Text, default="")
    # What the problem's last attempt spent before and beside its candidates: probe_s,
    # baselines_s (0 when reused from the store), baselines_stored, fixed_s (their sum).
    costs: Mapped[dict | None] = mapped_column(JSON, nullable=True, default=dict)
    added_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
