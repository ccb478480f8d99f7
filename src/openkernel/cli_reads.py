"""What `openkernel runs`, `show` and `archive` read: the database opened read-only (a file in
a read-only place reads too), a kernel by a unique prefix of its id (git's way), the runs
table fitted to the terminal, and a job's archive as a grid."""

from __future__ import annotations

from sqlalchemy import inspect, select
from sqlalchemy.engine import Engine

from openkernel.errors import OpenKernelError
from openkernel.wording import speedup_text
from openkernel.store import open_readonly, summary
from openkernel.store.tables import Kernel

PREFIX_LISTED = 10  # matches listed for an ambiguous prefix


def _columns(conn, names: tuple[str, ...] | None = None) -> list:
    """The kernels table's columns this database has (an older one lacks later columns)."""
    have = {c["name"] for c in inspect(conn).get_columns(Kernel.__tablename__)}
    return [c for c in Kernel.__table__.c if c.name in have and (names is None or c.name in names)]


def kernel_by_prefix(engine: Engine, prefix: str, shown: str) -> dict:
    """Every column of the kernel whose id is ``prefix`` or, alone, starts with it.

    Raises OpenKernelError naming the matches (at most ``PREFIX_LISTED``) when several do, or
    saying none does."""
    with engine.connect() as conn:
        cols = _columns(conn)
        exact = conn.execute(select(*cols).where(Kernel.id == prefix)).mappings().first()
        if exact is not None:
            return dict(exact)
        q = (select(*cols).where(Kernel.id.startswith(prefix, autoescape=True))
             .order_by(Kernel.created_at, Kernel.id).limit(PREFIX_LISTED + 1))
        rows = [dict(r) for r in conn.execute(q).mappings()]
    if len(rows) == 1:
        return rows[0]
    if not rows:
        raise OpenKernelError(f"no kernel with id {prefix!r} (or an id starting with it) in "
                              f"{shown}; `openkernel archive JOB` shows a job's kernels")
    listed = "\n".join(
        f"  {r['id']}  {r['label']:8} {r['status']:14} "
        f"{speedup_text(r['runtime_improvement']):>8}  {r['task_name']}/{r['job_name']}"
        for r in rows[:PREFIX_LISTED])
    more = "" if len(rows) <= PREFIX_LISTED else f"\n  ... and more: give more characters"
    raise OpenKernelError(f"{prefix!r} is the start of several kernel ids in {shown}:\n"
                          f"{listed}{more}")


def find_job(engine: Engine, job: str | None, task: str | None) -> dict:
    """The runs listing's row of a job: by name (and task where two tasks share it), or the
    most recently active job."""
    with engine.connect() as conn:
        rows, _ = summary.list_jobs(conn, "", limit=None)
    if job is not None:
        rows = [r for r in rows if r["job_name"] == job and (task is None or r["task_name"] == task)]
    elif task is not None:
        rows = [r for r in rows if r["task_name"] == task]
    if not rows:
        what = f"job {job!r}" if job else "job"
        raise OpenKernelError(f"no {what}{f' of task {task!r}' if task else ''} in this "
                              "database (`openkernel runs` lists them)")
    if job is not None and len({r["task_name"] for r in rows}) > 1:
        tasks = ", ".join(sorted(r["task_name"] for r in rows))
        raise OpenKernelError(f"job {job!r} exists for several tasks ({tasks}): add --task")
    return rows[0]


def job_kernels(engine: Engine, task: str, job: str) -> list[dict]:
    """A job's kernels with what the archive places them by (code and params for rows stored
    before the archive had its present dimensions)."""
    names = ("id", "label", "is_program0", "correctness", "score", "runtime_improvement",
             "features", "code", "metadata", "origin", "status")
    with engine.connect() as conn:
        q = (select(*_columns(conn, names))
             .where(Kernel.task_name == task, Kernel.job_name == job)
             .order_by(Kernel.created_at, Kernel.id))
        return [dict(r) for r in conn.execute(q).mappings()]

