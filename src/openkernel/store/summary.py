"""What a job amounts to: its candidates, status mix, best kernel and state.

`openkernel runs`, kernel-code's dashboard and kernelfoundry-gui all read jobs through here, so
they say the same thing. One definition of the best kernel, the search archive's: the correct
candidate with the highest score, never the reference (program 0); the earliest wins a tie. (A
kernel that failed the held-out shapes is an integrity violation, so it is not correct.) Counts
are of candidates: the reference is not one.

The listing never scans the kernels table: jobs come from the small ``runs`` table, and each
job's figures from two ranges of the ``ix_kernels_job_candidates`` index, only for the jobs
asked for (a page), which keeps it well under a second on a million kernels.
"""

from __future__ import annotations

from datetime import timezone

from sqlalchemy import String, and_, case, cast, func, inspect, null, or_, select, type_coerce
from sqlalchemy.engine import Connection

from openkernel.store.liveness import run_state, stale_before
from openkernel.store.tables import Kernel, Run

# "= 0", not "IS false": SQLite walks the index only for equalities.
CANDIDATE = Kernel.is_program0 == False  # noqa: E712
BEST_WHERE = (CANDIDATE, Kernel.correctness == True)  # noqa: E712
BEST_ORDER = (Kernel.score.desc(), Kernel.created_at, Kernel.id)
# Columns the runs table gained later; a database no engine has opened since lacks them.
LATER_RUN_COLUMNS = ("engine_host", "engine_pid", "heartbeat_at")


def run_columns(conn: Connection) -> list:
    """Every column of ``runs`` as a select expression (NULL for one an older database lacks)."""
    return table_columns(conn, Run.__table__)


def table_columns(conn: Connection, table) -> list:
    """Every column of a table as a select expression (NULL for one an older database lacks)."""
    have = {c["name"] for c in inspect(conn).get_columns(table.name)}
    return [c if c.name in have else null().label(c.name) for c in table.c]


def has_table(conn: Connection, name: str) -> bool:
    """Whether the database holds a table (one no engine has opened since it was added lacks it)."""
    return inspect(conn).has_table(name)


def as_text(column, conn: Connection):
    """A timestamp column as text, to compare and show without parsing: SQLite stores text
    already (so its index answers); PostgreSQL casts (UTC sessions: one format everywhere)."""
    return type_coerce(column, String) if conn.dialect.name == "sqlite" else cast(column, String)


def distinct_list(column, conn: Connection):
    """The distinct values of a column in a group, comma-separated (SQLite's group_concat
    takes no separator with DISTINCT; its default is the comma)."""
    if conn.dialect.name == "sqlite":
        return func.group_concat(column.distinct())
    return func.string_agg(column.distinct(), ",")


def stale_moment(conn: Connection):
    """``stale_before()`` as the database compares it: naive UTC text on SQLite, an aware
    moment on PostgreSQL."""
    moment = stale_before()
    return moment if conn.dialect.name == "sqlite" else moment.replace(tzinfo=timezone.utc)


def state_of(run: dict) -> str:
    """A run row's state now ("interrupted" for a "running" row whose engine is gone)."""
    return run_state(run.get("status"), run.get("engine_host"), run.get("engine_pid"),
                     run.get("heartbeat_at"), run.get("started_at"))


def job_figures(conn: Connection, task: str, job: str) -> dict:
    """Candidates, status mix, best kernel and newest kernel of one job (two index ranges)."""
    mix = (select(Kernel.status, func.count(), func.max(as_text(Kernel.created_at, conn)))
           .where(Kernel.task_name == task, Kernel.job_name == job, CANDIDATE)
           .group_by(Kernel.status))
    status, newest = {}, ""
    for name, n, created in conn.execute(mix):
        status[name] = n
        newest = max(newest, created or "")
    best = conn.execute(
        select(Kernel.id, Kernel.label, Kernel.runtime_improvement)
        .where(Kernel.task_name == task, Kernel.job_name == job, *BEST_WHERE)
        .order_by(*BEST_ORDER).limit(1)).first()
    return {"candidates": sum(status.values()), "status": status,
            "best_id": best[0] if best else None, "best_label": best[1] if best else "",
            "best_speedup": best[2] if best and best[2] and best[2] > 0 else -1.0,
            "last_kernel": newest[:19]}


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def list_jobs(conn: Connection, search: str = "", offset: int = 0,
              limit: int | None = 50) -> tuple[list[dict], int]:
    """A page of jobs, live ones first, then the most recently active, and how many match.

    Args:
        conn: a connection (a read-only one is enough).
        search: case-insensitive substring of the task name or the job name.
        offset: first job of the page.
        limit: jobs per page (None: all).

    Returns:
        ``(rows, total)``; each row holds task_name, job_name, runs, state (of its latest run:
        running, completed, stopped, failed or interrupted), running, hardware, last
        (activity), candidates, status (status -> count of candidates), best_id, best_label
        and best_speedup (-1 when no candidate is correct).
    """
    cols = {c.name: c for c in run_columns(conn)}
    last = func.max(func.coalesce(Run.finished_at, cols["heartbeat_at"], Run.started_at))
    # Live first: the SQL side can only see heartbeats; run_state below also checks the pid.
    fresh = func.coalesce(cols["heartbeat_at"], Run.started_at) > stale_moment(conn)
    live = func.max(case((and_(Run.status == "running", fresh), 1), else_=0))
    q = select(Run.task_name, Run.job_name, func.count(Run.id), live, last,
               distinct_list(Run.hardware, conn), func.max(Run.id))
    if search.strip():
        pattern = _like(search.strip())
        q = q.where(or_(Run.task_name.ilike(pattern, escape="\\"),
                        Run.job_name.ilike(pattern, escape="\\")))
    q = q.group_by(Run.task_name, Run.job_name)
    total = conn.execute(select(func.count()).select_from(q.subquery())).scalar_one()
    page = q.order_by(live.desc(), last.desc(), Run.task_name, Run.job_name).offset(offset)
    if limit is not None:
        page = page.limit(limit)
    rows = []
    for task, job, n_runs, _live, last_at, hardware, latest_id in conn.execute(page).all():
        latest = conn.execute(select(*cols.values()).where(Run.id == latest_id)).mappings().one()
        state = state_of(dict(latest))
        row = {"task_name": task, "job_name": job, "runs": n_runs, "state": state,
               "running": state == "running", "latest_run": dict(latest),
               "hardware": ", ".join(sorted({h for h in (hardware or "").split(",") if h})),
               "last": str(last_at or "")[:19]}
        row.update(job_figures(conn, task, job))
        row["last"] = max(row["last"], row["last_kernel"])
        rows.append(row)
    return rows, total
