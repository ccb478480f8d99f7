"""The engine's writes to the results database, and its reads of one job.

SQLite runs in WAL mode so the dashboard can read while the engine writes; each candidate is
committed as soon as it is judged, so a killed engine loses at most the candidates in flight.
Every text written (prompts, answers, code, logs, a run's error, the critic's lines) goes
through the one redactor first (``openkernel.redaction``): no key is stored, even one a provider
echoed. On PostgreSQL (a ``postgresql://`` URL) several engines, one per host, write their own jobs
into one database at once: rows are keyed by job, run ids come from the server, kernel ids are
random, and the rows two engines may both write (reference timings) are upserts.

Opening a ``Store`` migrates the database to the newest tables (``store.migrate``).
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from sqlalchemy import inspect, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError
from sqlalchemy.orm import Session, sessionmaker

from openkernel.errors import OpenKernelError
from openkernel.redaction import redact, redact_all
from openkernel.store import engines, migrate, summary
from openkernel.store.engines import engine_url
from openkernel.store.liveness import Heartbeat, this_host
from openkernel.store.tables import (
    Base,
    Critique,
    InductorCapture,
    Kernel,
    LLMCallRecord,
    ReferenceTiming,
    Run,
    SuiteProblem,
)

# How long an engine opening a database waits for others migrating it (each try waits
# busy_timeout): a first migration of a new file takes seconds, more on a loaded machine.
MIGRATION_WAIT_S = 120.0


class Store:
    """The engine's handle on the database: the only writer."""

    def __init__(self, path_or_url: str | Path):
        url = engine_url(path_or_url)
        self.url = url
        self._given = str(path_or_url)
        self.shown = engines.shown(path_or_url)  # for messages: no password
        self.path: Path | None = engines.sqlite_file(url)
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise OpenKernelError(f"{self.path.parent}: cannot create the database folder ({err.strerror})") from None
            why = _cannot_write(self.path)
            if why:
                raise OpenKernelError(
                    f"{self.path}: cannot write the results database: {why}. Set "
                    "paths.kernels_db_path to a writable place; readers (`openkernel runs`, "
                    "`show`, the dashboards) open it read-only where it is.")
        self.engine = engines.writer(path_or_url)
        self.postgres = self.engine.dialect.name == "postgresql"
        deadline = time.monotonic() + MIGRATION_WAIT_S
        while True:
            try:
                migrate.upgrade(self.engine)
                break
            except DatabaseError as err:
                locked = "database is locked" in str(err.orig)
                if locked and time.monotonic() < deadline:
                    continue  # another engine is migrating this file: each try waits busy_timeout
                self.engine.dispose()
                if not locked:
                    raise OpenKernelError(f"{self.shown}: not an openkernel database "
                                          f"({err.orig})") from None
                raise OpenKernelError(f"{self.shown}: busy: another process kept its write lock "
                                      "too long to open it; try again") from None
        self.session = sessionmaker(self.engine, expire_on_commit=False)

    @property
    def location(self) -> str:
        """Where the results are, as events and messages say it: the file, or the URL as given
        (with its password, if any: the dashboard opens it with this)."""
        return str(self.path) if self.path is not None else self._given

    def __repr__(self) -> str:
        return f"Store({self.shown})"

    def _upsert(self, table, keys: tuple[str, ...], **values) -> None:
        """Insert a row, or update it where one with the same keys exists: one statement, so
        two engines writing the same row at once never collide on its primary key."""
        insert = pg_insert if self.postgres else sqlite_insert
        stmt = insert(table).values(**values)
        stmt = stmt.on_conflict_do_update(index_elements=list(keys),
                                          set_={k: v for k, v in values.items() if k not in keys})
        with self.engine.begin() as conn:
            conn.execute(stmt)

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
                run.error = redact(error)
                run.finished_at = datetime.now(timezone.utc)

    def job_runs(self, task_name: str, job_name: str) -> list[Run]:
        """Every run of a job, oldest first (a resumed job has several)."""
        with self.session() as s:
            q = (select(Run).where(Run.task_name == task_name, Run.job_name == job_name)
                 .order_by(Run.id))
            return list(s.scalars(q))

    # kernels --------------------------------------------------------------------------------
    def add_kernel(self, **fields) -> Kernel:
        fields = redact_all(fields)
        if self.postgres:  # PostgreSQL's text cannot hold NUL (a candidate's output may)
            fields = {k: v.replace("\x00", "\ufffd") if isinstance(v, str) else v
                      for k, v in fields.items()}
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
                           iteration=iteration, text=redact(text), source=source, **diagnosis)
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
    def reference_timing(self, task_digest: str, hardware: str, kind: str,
                         environment: str = "") -> ReferenceTiming | None:
        with self.session() as s:
            return s.get(ReferenceTiming, (task_digest, hardware, kind, environment))

    def put_reference_timing(self, task_digest: str, hardware: str, kind: str, runtime: float,
                             runtime_stats: dict, environment: str = "") -> None:
        self._upsert(ReferenceTiming.__table__, ("task_digest", "hardware", "kind", "environment"),
                     task_digest=task_digest, hardware=hardware, kind=kind, runtime=runtime,
                     runtime_stats=runtime_stats, environment=environment,
                     created_at=datetime.now(timezone.utc))

    # Inductor captures ------------------------------------------------------------------------
    def inductor_captures(self, task_digest: str, hardware: str, environment: str,
                          tf32: bool) -> dict | None:
        """The probe's stored captures for this key (its record), or None."""
        with self.session() as s:
            row = s.get(InductorCapture, (task_digest, hardware, environment, tf32))
            return row.record if row is not None else None

    def put_inductor_captures(self, task_digest: str, hardware: str, environment: str,
                              tf32: bool, record: dict) -> None:
        self._upsert(InductorCapture.__table__, ("task_digest", "hardware", "environment", "tf32"),
                     task_digest=task_digest, hardware=hardware, environment=environment,
                     tf32=tf32, record=record, created_at=datetime.now(timezone.utc))


    # benchmark suites --------------------------------------------------------------------------
    def add_suite_problem(self, *, suite: str, task_name: str, job_name: str, position: int,
                          path: str, task_digest: str) -> None:
        """File a problem under a suite (again on a resumed suite: the newest path wins)."""
        self._upsert(SuiteProblem.__table__, ("suite", "task_name"), suite=suite,
                     task_name=task_name, job_name=job_name, position=position, path=path,
                     task_digest=task_digest)

    def set_suite_outcome(self, suite: str, task_name: str, outcome: str, error: str = "") -> None:
        with self.session() as s, s.begin():
            row = s.get(SuiteProblem, (suite, task_name))
            if row is not None:
                row.outcome, row.error = outcome, error

    def set_suite_costs(self, suite: str, task_name: str, costs: dict) -> None:
        """What the problem's last attempt spent on its probe and baselines (seconds)."""
        with self.session() as s, s.begin():
            row = s.get(SuiteProblem, (suite, task_name))
            if row is not None:
                row.costs = costs

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


def _cannot_write(path: Path) -> str | None:
    """Why the engine could not write a SQLite database here, tried for real (a read-only
    mount, a folder or file of another user, an immutable file; as root too), or None."""
    try:
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as err:  # SQLite keeps its -wal and -shm files beside the database
        return f"its folder {path.parent} is not writable ({err.strerror})"
    if path.exists():
        try:
            with open(path, "r+b"):
                pass
        except OSError as err:
            return f"the file is not writable ({err.strerror})"
    return None


def _as_dict(run: Run) -> dict:
    return {c.name: getattr(run, c.name) for c in Run.__table__.c}


def open_readonly(path_or_url: str | Path, complete: bool = False) -> Engine:
    """An engine on an existing results database that cannot write to it: a SQLite file (or
    ``sqlite:///`` URL) or a PostgreSQL URL (read-only transactions). ``complete``: see
    :func:`require_tables`."""
    engine = engines.reader(path_or_url)
    try:
        require_tables(engine, engines.shown(path_or_url), complete)
    except BaseException:
        engine.dispose()
        raise
    return engine


def require_tables(engine: Engine, shown: str, complete: bool = False) -> None:
    """Raise OpenKernelError unless the database holds openkernel's tables. Readers (``runs``,
    ``show``, ``export``, the dashboards) call this instead of migrating: they never create a
    table, and say what is missing. ``complete``: also every column of ``tables.py`` in each
    openkernel table it holds (readers that select whole rows; the others read an older
    database as it is)."""
    try:
        found = inspect(engine)
        tables = set(found.get_table_names())
    except DatabaseError as err:
        kind = "a PostgreSQL" if engine.dialect.name == "postgresql" else "an SQLite"
        raise OpenKernelError(f"{shown}: not {kind} database ({err.orig})") from None
    ours = set(Base.metadata.tables)
    if not tables - {"alembic_version"}:
        raise OpenKernelError(f"no openkernel tables at {shown}: run openkernel db upgrade")
    if not tables & ours:
        raise OpenKernelError(f"{shown}: not an openkernel database (no kernels/runs tables)")
    missing = sorted({"kernels", "runs"} - tables)
    for name in sorted(ours & tables) if complete else ():
        have = {col["name"] for col in found.get_columns(name)}
        missing += [f"{name}.{c.name}" for c in Base.metadata.tables[name].c if c.name not in have]
    if missing:
        raise OpenKernelError(f"{shown}: openkernel tables from an older version, without "
                              f"{', '.join(missing)}: run openkernel db upgrade")


def iter_kernels(engine: Engine, task_name: str, job_name: str) -> Iterable[Kernel]:
    with Session(engine) as s:
        yield from s.scalars(
            select(Kernel).where(Kernel.task_name == task_name, Kernel.job_name == job_name)
        )
