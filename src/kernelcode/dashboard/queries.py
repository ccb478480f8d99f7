"""Read-only SQL for the dashboard: every query it makes lives here.

The runs listing is ``openkernel.store.summary``'s, shared with `openkernel runs`: it never
scans the kernels table, so it answers in well under a second on a million kernels.

The graph of a job needs every kernel of it but not their prompts, answers or code, so
``job_kernels`` selects the light columns only.

The critic's diagnoses live in the ``critiques`` table, which databases written before it
existed lack until the engine opens them again: every read of it first asks the database whether
the table is there and, if not, answers as for a job without critiques. Every query is
SQLAlchemy Core that SQLite and PostgreSQL both run (``summary`` holds the few that differ).
"""

from __future__ import annotations

from sqlalchemy import func, inspect, null, select
from sqlalchemy.engine import Engine

from openkernel.store import summary
from openkernel.store.tables import Critique, Kernel, LLMCallRecord, Run

# Columns of a kernel that the graph, the table and the figures read; the heavy text fields
# (prompt, answer, code, logs) are fetched one kernel at a time by ``kernel_detail``.
_LIGHT = [
    Kernel.id, Kernel.label, Kernel.iteration, Kernel.branch, Kernel.parent_id,
    Kernel.is_program0, Kernel.status, Kernel.compiled, Kernel.correctness, Kernel.runtime,
    Kernel.runtime_stats, Kernel.runtime_improvement, Kernel.improve_over_compile,
    Kernel.score, Kernel.model, Kernel.origin, Kernel.description, Kernel.features,
    Kernel.meta.label("meta"),
    Kernel.hardware, Kernel.backend, Kernel.created_at,
]
# Columns kernels gained later (migrations); a database no engine has opened since lacks them.
LATER_KERNEL_COLUMNS = ("author",)


def _later_kernel_columns(conn) -> list:
    """The later columns as select expressions: NULL where the database does not have them."""
    have = {c["name"] for c in inspect(conn).get_columns(Kernel.__tablename__)}
    return [Kernel.__table__.c[name] if name in have else null().label(name)
            for name in LATER_KERNEL_COLUMNS]


def list_jobs(engine: Engine, search: str = "", offset: int = 0, limit: int = 50) -> tuple[list[dict], int]:
    """One page of jobs, live ones first, then the most recently active, and how many match
    ``search`` (``openkernel.store.summary.list_jobs``, which `openkernel runs` reads too: the
    best kernel and the counts mean the same in both)."""
    with engine.connect() as conn:
        return summary.list_jobs(conn, search, offset, limit)


_has_table = summary.has_table  # an older database may lack ``critiques`` or ``llm_calls``


def job_signature(engine: Engine, task: str, job: str) -> tuple[int, str, int, str]:
    """``(kernels, newest created_at, critiques, state)`` of a job: cheap, tells whether anything
    changed.

    The critic's line for an iteration is stored after that iteration's last kernel, and a run
    ends (or its engine dies, or a resume starts) without a new kernel, so the critique count
    and the latest run's state are part of the signature: the page shows them without waiting
    for a kernel.
    """
    with engine.connect() as conn:
        q = select(func.count(), func.max(summary.as_text(Kernel.created_at, conn))).where(
            Kernel.task_name == task, Kernel.job_name == job)
        n, newest = conn.execute(q).one()
        critiques = 0
        if _has_table(conn, Critique.__tablename__):
            critiques = conn.execute(select(func.count()).where(
                Critique.task_name == task, Critique.job_name == job)).scalar_one()
        latest = conn.execute(select(*summary.run_columns(conn)).where(
            Run.task_name == task, Run.job_name == job).order_by(Run.id.desc()).limit(1)).mappings().first()
    state = summary.state_of(dict(latest)) if latest else ""
    return int(n), newest or "", int(critiques), state


def job_critiques(engine: Engine, task: str, job: str, limit: int = 500) -> list[dict]:
    """The critic's diagnoses of a job, newest last (the newest ``limit`` of them).

    Each row holds iteration, text, source, run_id and created_at; a database without the
    ``critiques`` table (written before it existed) gives an empty list.
    """
    cols = [Critique.iteration, Critique.text, Critique.source, Critique.run_id, Critique.created_at]
    q = (select(*cols).where(Critique.task_name == task, Critique.job_name == job)
         .order_by(Critique.iteration.desc(), Critique.id.desc()).limit(limit))
    with engine.connect() as conn:
        if not _has_table(conn, Critique.__tablename__):
            return []
        rows = [dict(r._mapping) for r in conn.execute(q)]
    for row in rows:
        row["created_at"] = str(row["created_at"] or "")[:19]
    return rows[::-1]


def job_calls(engine: Engine, task: str, job: str) -> list[dict] | None:
    """The job's model calls summed per (model, purpose); None for a database written before
    calls were stored (no ``llm_calls`` table)."""
    c = LLMCallRecord
    q = (select(c.model, c.purpose, func.count(), func.sum(c.prompt_tokens),
                func.sum(c.completion_tokens), func.sum(c.cost_usd),
                func.count().filter(c.price == "unknown"))
         .where(c.task_name == task, c.job_name == job).group_by(c.model, c.purpose))
    with engine.connect() as conn:
        if not _has_table(conn, c.__tablename__):
            return None
        return [{"model": m, "purpose": p, "calls": n, "prompt_tokens": pt or 0,
                 "completion_tokens": ct or 0, "cost_usd": usd or 0.0, "unpriced": unk}
                for m, p, n, pt, ct, usd, unk in conn.execute(q)]


def job_runs(engine: Engine, task: str, job: str) -> list[dict]:
    """Every run of a job, oldest first (a resumed job has several), each with its ``state``
    now (a "running" run whose engine is gone reads "interrupted")."""
    with engine.connect() as conn:
        q = (select(*summary.run_columns(conn)).where(Run.task_name == task, Run.job_name == job)
             .order_by(Run.id))
        runs = [dict(r._mapping) for r in conn.execute(q)]
    for run in runs:
        run["state"] = summary.state_of(run)
    return runs


def job_kernels(engine: Engine, task: str, job: str) -> list[dict]:
    """The light columns of every kernel of a job, in (iteration, branch) order."""
    with engine.connect() as conn:
        q = (select(*_LIGHT, *_later_kernel_columns(conn), Kernel.profiler_data)
             .where(Kernel.task_name == task, Kernel.job_name == job)
             .order_by(Kernel.iteration, Kernel.branch, Kernel.created_at))
        rows = [dict(r._mapping) for r in conn.execute(q)]
    for row in rows:
        row["created_at"] = str(row["created_at"] or "")[:19]
        for key in ("runtime_stats", "features", "meta", "profiler_data"):
            row[key] = row[key] if isinstance(row[key], dict) else {}
    return rows


def kernel_detail(engine: Engine, kernel_id: str) -> dict | None:
    """Every recorded field of one kernel, or None when there is no such id."""
    with engine.connect() as conn:
        cols = [c for c in Kernel.__table__.c if c.name not in LATER_KERNEL_COLUMNS]
        row = conn.execute(select(*cols, *_later_kernel_columns(conn))
                           .where(Kernel.id == kernel_id)).first()
    if row is None:
        return None
    data = dict(row._mapping)
    data["meta"] = data.pop("metadata", None) or {}
    return data
