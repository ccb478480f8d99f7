"""Opening the database and the engine's writes to it.

SQLite runs in WAL mode so the dashboard can read while the engine writes; each candidate is
committed as soon as it is judged, so a killed engine loses at most the candidates in flight.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from sqlalchemy import create_engine, event, inspect, select, text, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from openkernel.errors import OpenKernelError
from openkernel.store import summary
from openkernel.store.liveness import Heartbeat, this_host
from openkernel.store.tables import (
    Base,
    Critique,
    Kernel,
    LLMCallRecord,
    ReferenceTiming,
    Run,
    SuiteProblem,
)


def engine_url(path_or_url: str | Path) -> str:
    text = str(path_or_url)
    return text if "://" in text else f"sqlite:///{Path(text).expanduser().resolve()}"


def _sqlite_pragmas(engine: Engine, readonly: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # pragma: no cover - exercised through every test
        cur = dbapi_conn.cursor()
        if not readonly:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.close()


class Store:
    """The engine's handle on the database: the only writer."""

    def __init__(self, path_or_url: str | Path):
        url = engine_url(path_or_url)
        self.url = url
        if url.startswith("sqlite:///"):
            db_file = Path(url[len("sqlite:///"):])
            try:
                db_file.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OpenKernelError(f"{db_file.parent}: cannot create the database folder ({err.strerror})") from None
            self.path: Path | None = db_file
        else:
            self.path = None
        self.engine = create_engine(url)
        if url.startswith("sqlite"):
            _sqlite_pragmas(self.engine, readonly=False)
        try:
            Base.metadata.create_all(self.engine)
            _add_missing_columns_and_indexes(self.engine)
        except DatabaseError as err:
            raise OpenKernelError(f"{path_or_url}: not an openkernel database ({err.orig})") from None
        self.session = sessionmaker(self.engine, expire_on_commit=False)

    def __repr__(self) -> str:
        return f"Store({self.url})"

    def close(self) -> None:
        self.engine.dispose()

    def checkpoint(self) -> None:
        """Fold SQLite's write-ahead log into the database file, so a copy of that one file
        holds everything written so far (a copy without its -wal file loses what is in it)."""
        if self.url.startswith("sqlite"):
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

    # runs -----------------------------------------------------------------------------------
    def start_run(self, **fields) -> Run:
        """A new run row for this engine process. Earlier runs of the same job whose engine is
        gone (killed, say) are stored as interrupted: the job's state is its latest run's."""
        fields.setdefault("engine_host", this_host())
        fields.setdefault("engine_pid", os.getpid())
        with self.session() as s, s.begin():
            if "task_name" in fields and "job_name" in fields:
                for old in s.scalars(select(Run).where(
                        Run.task_name == fields["task_name"], Run.job_name == fields["job_name"],
                        Run.status == "running")):
                    if summary.state_of(_as_dict(old)) == "interrupted":
                        old.status = "interrupted"
                        old.finished_at = old.heartbeat_at or old.started_at
            run = Run(**fields)
            s.add(run)
        return run

    def heartbeat(self, run_id: int) -> Heartbeat:
        """Keep the run's ``heartbeat_at`` fresh from a thread until the returned beat stops."""
        def beat() -> None:
            with self.session() as s, s.begin():
                s.execute(update(Run).where(Run.id == run_id)
                          .values(heartbeat_at=datetime.now(timezone.utc)))

        beat()
        return Heartbeat(beat)

    def finish_run(self, run_id: int, status: str, error: str = "") -> None:
        with self.session() as s, s.begin():
            run = s.get(Run, run_id)
            if run is not None:
                run.status = status
                run.error = error
                run.finished_at = datetime.now(timezone.utc)

    def job_runs(self, task_name: str, job_name: str) -> list[Run]:
        """Every run of a job, oldest first (a resumed job has several)."""
        with self.session() as s:
            q = (select(Run).where(Run.task_name == task_name, Run.job_name == job_name)
                 .order_by(Run.id))
            return list(s.scalars(q))

    # kernels --------------------------------------------------------------------------------
    def add_kernel(self, **fields) -> Kernel:
        with self.session() as s, s.begin():
            row = Kernel(**fields)
            s.add(row)
        return row

    def delete_kernel(self, kernel_id: str) -> None:
        """Drop one row (a generation failure, replaced by its retry on resume)."""
        with self.session() as s, s.begin():
            row = s.get(Kernel, kernel_id)
            if row is not None:
                s.delete(row)

    def job_kernels(self, task_name: str, job_name: str) -> list[Kernel]:
        with self.session() as s:
            q = (
                select(Kernel)
                .where(Kernel.task_name == task_name, Kernel.job_name == job_name)
                .order_by(Kernel.iteration, Kernel.branch)
            )
            return list(s.scalars(q))

    def get_kernel(self, kernel_id: str) -> Kernel | None:
        with self.session() as s:
            return s.get(Kernel, kernel_id)

    def best_kernel(self, task_name: str, gpu_arch: str | None = None) -> Kernel | None:
        """The best kernel stored for a task (and architecture), as ``summary`` defines it."""
        with self.session() as s:
            q = select(Kernel).where(Kernel.task_name == task_name, *summary.BEST_WHERE)
            if gpu_arch:
                q = q.where(Kernel.gpu_arch == gpu_arch)
            return s.scalars(q.order_by(*summary.BEST_ORDER).limit(1)).first()

    def list_jobs(self, search: str = "") -> list[dict]:
        """Every job, live ones first, then the most recently active (``summary.list_jobs``)."""
        with self.engine.connect() as conn:
            return summary.list_jobs(conn, search, limit=None)[0]

    # critiques -------------------------------------------------------------------------------
    def add_critique(self, *, run_id: int, task_name: str, job_name: str, iteration: int, text: str,
                     source: str = "rules", **diagnosis) -> Critique:
        """Store the critic's diagnosis of one kernel after one iteration of a job.

        ``diagnosis``: kernel_id, label, role, bottleneck, headroom, model (see ``Critique``).
        """
        with self.session() as s, s.begin():
            row = Critique(run_id=run_id, task_name=task_name, job_name=job_name,
                           iteration=iteration, text=text, source=source, **diagnosis)
            s.add(row)
        return row

    def job_critiques(self, task_name: str, job_name: str) -> list[Critique]:
        """Every stored diagnosis of a job, oldest iteration first (a resumed job: all runs)."""
        with self.session() as s:
            q = (
                select(Critique)
                .where(Critique.task_name == task_name, Critique.job_name == job_name)
                .order_by(Critique.iteration, Critique.id)
            )
            return list(s.scalars(q))

    # model calls -----------------------------------------------------------------------------
    def add_llm_call(self, **fields) -> LLMCallRecord:
        """Store one answered model call (columns of ``LLMCallRecord``)."""
        with self.session() as s, s.begin():
            row = LLMCallRecord(**fields)
            s.add(row)
        return row

    def job_llm_calls(self, task_name: str, job_name: str) -> list[LLMCallRecord]:
        """Every answered model call of a job (a resumed job: all its runs), oldest first."""
        with self.session() as s:
            q = (select(LLMCallRecord)
                 .where(LLMCallRecord.task_name == task_name, LLMCallRecord.job_name == job_name)
                 .order_by(LLMCallRecord.id))
            return list(s.scalars(q))

    # reference timings ----------------------------------------------------------------------
    def reference_timing(self, task_digest: str, hardware: str, kind: str) -> ReferenceTiming | None:
        with self.session() as s:
            return s.get(ReferenceTiming, (task_digest, hardware, kind))

    def put_reference_timing(self, task_digest: str, hardware: str, kind: str, runtime: float,
                             runtime_stats: dict) -> None:
        with self.session() as s, s.begin():
            s.merge(ReferenceTiming(task_digest=task_digest, hardware=hardware, kind=kind,
                                    runtime=runtime, runtime_stats=runtime_stats))


    # benchmark suites --------------------------------------------------------------------------
    def add_suite_problem(self, *, suite: str, task_name: str, job_name: str, position: int,
                          path: str, task_digest: str) -> None:
        """File a problem under a suite (again on a resumed suite: the newest path wins)."""
        with self.session() as s, s.begin():
            s.merge(SuiteProblem(suite=suite, task_name=task_name, job_name=job_name,
                                 position=position, path=path, task_digest=task_digest))

    def set_suite_outcome(self, suite: str, task_name: str, outcome: str, error: str = "") -> None:
        with self.session() as s, s.begin():
            row = s.get(SuiteProblem, (suite, task_name))
            if row is not None:
                row.outcome, row.error = outcome, error

    def suite_outcome(self, suite: str, task_name: str) -> str:
        with self.session() as s:
            row = s.get(SuiteProblem, (suite, task_name))
            return row.outcome if row is not None else ""

    def job_finished(self, task_name: str, job_name: str) -> bool:
        """Whether the newest run of a job completed (a suite resumed skips it)."""
        with self.session() as s:
            q = (select(Run.status).where(Run.task_name == task_name, Run.job_name == job_name)
                 .order_by(Run.id.desc()).limit(1))
            return s.scalars(q).first() == "completed"


def _as_dict(run: Run) -> dict:
    return {c.name: getattr(run, c.name) for c in Run.__table__.c}


def _add_missing_columns_and_indexes(engine: Engine) -> list[str]:
    """Bring a database made by an older openkernel up to the tables, in place.

    ``create_all`` makes missing tables but leaves existing ones as they are; this adds each
    column the tables declare and the database lacks, as a nullable column (``ALTER TABLE ...
    ADD COLUMN``, which SQLite and PostgreSQL do without rewriting the table), then each missing
    index. Renames and type changes are not migrations this can do: use Alembic for those.
    Returns ``table.column`` for each column added.
    """
    inspector = inspect(engine)
    added = []
    with engine.begin() as conn:
        for table in Base.metadata.sorted_tables:
            if not inspector.has_table(table.name):
                continue
            have = {c["name"] for c in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name not in have:
                    kind = column.type.compile(engine.dialect)
                    conn.execute(text(f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" {kind}'))
                    added.append(f"{table.name}.{column.name}")
            for index in table.indexes:
                index.create(conn, checkfirst=True)
    return added


def open_readonly(path: str | Path) -> Engine:
    """An engine on an existing SQLite database that cannot write to it."""
    db_file = Path(path).expanduser()
    if not db_file.is_file():
        raise OpenKernelError(f"{db_file}: no such database")
    uri = f"file:{db_file.resolve()}?mode=ro"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    # A pool of its own: "sqlite://" alone means SingletonThreadPool, which closes other threads'
    # connections once five threads have one, mid-query (the dashboard serves each request on
    # its own thread: closed-database errors, even segfaults).
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool)
    _sqlite_pragmas(engine, readonly=True)
    try:
        with engine.connect() as conn:
            tables = {r[0] for r in conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type='table'")}
    except DatabaseError as err:
        raise OpenKernelError(f"{db_file}: not an SQLite database ({err.orig})") from None
    if not {"kernels", "runs"} <= tables:
        raise OpenKernelError(f"{db_file}: not an openkernel database (no kernels/runs tables)")
    return engine


def iter_kernels(engine: Engine, task_name: str, job_name: str) -> Iterable[Kernel]:
    with Session(engine) as s:
        yield from s.scalars(
            select(Kernel).where(Kernel.task_name == task_name, Kernel.job_name == job_name)
        )
