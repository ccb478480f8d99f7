"""Read-only SQL for the dashboard: every query it makes lives here.

The runs listing must answer in well under a second on a database of a million kernels, so it
never scans the kernels table: the list of jobs comes from the small ``runs`` table, and the
per-job figures (counts, status mix, best speedup, last activity) are computed only for the
page of jobs on screen, each through the ``ix_kernels_task_job`` index.

The graph of a job needs every kernel of it but not their prompts, answers or code, so
``job_kernels`` selects the light columns only and leaves a deep-profiling heatmap behind
(``json_remove``: the dashboard opens SQLite only, see ``openkernel.store.open_readonly``).

The critic's diagnoses live in the ``critiques`` table, which databases written before it
existed lack until the engine opens them again: every read of it first asks SQLite whether the
table is there and, if not, answers as for a job without critiques.
"""

from __future__ import annotations

from sqlalchemy import JSON, String, func, or_, select, type_coerce
from sqlalchemy.engine import Engine

from openkernel.store.tables import Critique, Kernel, LLMCallRecord, Run

# Columns of a kernel that the graph, the table and the figures read; the heavy text fields
# (prompt, answer, code, logs) are fetched one kernel at a time by ``kernel_detail``.
_LIGHT = [
    Kernel.id, Kernel.label, Kernel.iteration, Kernel.branch, Kernel.parent_id,
    Kernel.is_program0, Kernel.status, Kernel.compiled, Kernel.correctness, Kernel.runtime,
    Kernel.runtime_stats, Kernel.runtime_improvement, Kernel.improve_over_compile,
    Kernel.score, Kernel.model, Kernel.origin, Kernel.description, Kernel.features,
    Kernel.meta.label("meta"),
    Kernel.hardware, Kernel.created_at,
]


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def list_jobs(engine: Engine, search: str = "", offset: int = 0, limit: int = 50) -> tuple[list[dict], int]:
    """One page of jobs, most recently active first, and how many jobs match ``search``.

    Args:
        engine: a read-only engine.
        search: case-insensitive substring of the task name or the job name.
        offset: first job of the page.
        limit: jobs per page.

    Returns:
        ``(rows, total)``; each row holds task_name, job_name, runs, running, hardware,
        last (activity), kernels, status (status -> count) and best_speedup.
    """
    last = func.max(func.coalesce(Run.finished_at, Run.started_at))
    running = func.max(Run.status == "running")
    q = select(Run.task_name, Run.job_name, func.count(Run.id), running, last,
               func.group_concat(Run.hardware.distinct()))
    if search.strip():
        pattern = _like(search.strip())
        q = q.where(or_(Run.task_name.ilike(pattern, escape="\\"),
                        Run.job_name.ilike(pattern, escape="\\")))
    q = q.group_by(Run.task_name, Run.job_name)
    with engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(q.subquery())).scalar_one()
        page = conn.execute(q.order_by(running.desc(), last.desc()).offset(offset).limit(limit)).all()
        rows = []
        for task, job, n_runs, is_running, last_at, hardware in page:
            row = {"task_name": task, "job_name": job, "runs": n_runs, "running": bool(is_running),
                   "hardware": ", ".join(sorted({h for h in (hardware or "").split(",") if h})),
                   "last": str(last_at or "")[:19]}
            row.update(_job_figures(conn, task, job))
            if row["last_kernel"] > row["last"]:
                row["last"] = row["last_kernel"]
            rows.append(row)
    return rows, total


def _job_figures(conn, task: str, job: str) -> dict:
    """Status mix, count, best speedup and newest kernel of one job (an index range)."""
    q = (select(Kernel.status, func.count(), func.max(Kernel.runtime_improvement),
                func.max(type_coerce(Kernel.created_at, String)))
         .where(Kernel.task_name == task, Kernel.job_name == job)
         .group_by(Kernel.status))
    status, best, newest = {}, -1.0, ""
    for name, n, speedup, created in conn.execute(q):
        status[name] = n
        if name in ("faster", "correct") and speedup is not None:
            best = max(best, speedup)
        newest = max(newest, created or "")
    return {"kernels": sum(status.values()), "status": status, "best_speedup": best,
            "last_kernel": newest[:19]}


def _has_table(conn, name: str) -> bool:
    """Whether the database holds a table (an older one may lack ``critiques``)."""
    q = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return conn.exec_driver_sql(q, (name,)).first() is not None


def job_signature(engine: Engine, task: str, job: str) -> tuple[int, str, int]:
    """``(kernels, newest created_at, critiques)`` of a job: cheap, tells whether anything changed.

    The critic's line for an iteration is stored after that iteration's last kernel, so the
    critique count is part of the signature: the page shows it without waiting for a kernel.
    """
    q = select(func.count(), func.max(type_coerce(Kernel.created_at, String))).where(
        Kernel.task_name == task, Kernel.job_name == job)
    with engine.connect() as conn:
        n, newest = conn.execute(q).one()
        critiques = 0
        if _has_table(conn, Critique.__tablename__):
            critiques = conn.execute(select(func.count()).where(
                Critique.task_name == task, Critique.job_name == job)).scalar_one()
    return int(n), newest or "", int(critiques)


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
    """Every run of a job, oldest first (a resumed job has several)."""
    q = select(*Run.__table__.c).where(Run.task_name == task, Run.job_name == job).order_by(Run.id)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(q)]


def job_kernels(engine: Engine, task: str, job: str) -> list[dict]:
    """The light columns of every kernel of a job, in (iteration, branch) order."""
    profiler = type_coerce(func.json_remove(Kernel.profiler_data, "$.memory_heatmap"), JSON)
    heat = func.json_type(Kernel.profiler_data, "$.memory_heatmap").is_not(None)
    q = (select(*_LIGHT, profiler.label("profiler_data"), heat.label("has_heatmap"))
         .where(Kernel.task_name == task, Kernel.job_name == job)
         .order_by(Kernel.iteration, Kernel.branch, Kernel.created_at))
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(q)]
    for row in rows:
        row["created_at"] = str(row["created_at"] or "")[:19]
        for key in ("runtime_stats", "features", "meta", "profiler_data"):
            row[key] = row[key] if isinstance(row[key], dict) else {}
    return rows


def kernel_detail(engine: Engine, kernel_id: str) -> dict | None:
    """Every recorded field of one kernel, or None when there is no such id."""
    with engine.connect() as conn:
        row = conn.execute(select(*Kernel.__table__.c).where(Kernel.id == kernel_id)).first()
    if row is None:
        return None
    data = dict(row._mapping)
    data["meta"] = data.pop("metadata", None) or {}
    return data


def memory_heatmap(engine: Engine, kernel_id: str) -> list | None:
    """The deep-profiling heatmap of one kernel (a 2-D list), if it has one."""
    q = select(type_coerce(func.json_extract(Kernel.profiler_data, "$.memory_heatmap"), JSON)).where(
        Kernel.id == kernel_id)
    with engine.connect() as conn:
        value = conn.execute(q).scalar_one_or_none()
    return value if isinstance(value, list) and value else None
