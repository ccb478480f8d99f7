"""Where the pages get their data: a lazily opened read-only engine and a per-job cache.

The engine is opened on first use and again after a failure, so a dashboard started before
the engine has created its database (the TUI's ``d`` early in a run) shows a clear message and
then the data once it exists. Job data is cached by the job's signature (count and newest
kernel, count of critic lines, the latest run's state): the live refresh asks only for the
signature every tick and reloads the job's rows only when it changed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError

from kernelcode.dashboard import queries
from kernelcode.dashboard.graph import best_kernel_id
from openkernel.bench import summary
from openkernel.errors import OpenKernelError
from openkernel.store import open_readonly
from openkernel.db_location import is_url


def open_db(path: str | Path) -> Engine:
    """``open_readonly`` that also turns "file is not a database" into OpenKernelError.

    ``open_readonly`` lets sqlite's DatabaseError through for a file that is not SQLite at all
    (a text file given as --db); the user should get the same one-line message as for a
    foreign SQLite database.
    """
    try:
        return open_readonly(path)
    except DatabaseError as err:
        raise OpenKernelError(f"{path}: not an openkernel database ({err.orig})") from None


@dataclass
class JobData:
    """One job as the pages draw it: light kernel rows, runs, the best kernel, critic lines."""

    task_name: str
    job_name: str
    signature: tuple[int, str, int, str]
    rows: list[dict]
    runs: list[dict]
    best_id: str | None
    critiques: list[dict] = field(default_factory=list)
    calls: list[dict] | None = None  # model calls per (model, purpose); None: not recorded
    by_id: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {r["id"]: r for r in self.rows}

    @property
    def state(self) -> str:
        """The job's state: its latest run's (interrupted when a running one's engine is gone)."""
        return self.runs[-1]["state"] if self.runs else "no run row"

    @property
    def running(self) -> bool:
        """True while the job's latest run is going on."""
        return self.state == "running"


class DataSource:
    """Read-only access to one results database for the dashboard's callbacks.

    Args:
        db_path: the results database: a SQLite file or a PostgreSQL URL.
        cache_size: how many jobs to keep in memory.
    """

    def __init__(self, db_path: str | Path, cache_size: int = 8):
        self.db_path = db_path if is_url(db_path) else Path(db_path)
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], JobData] = {}
        self._cache_size = cache_size

    def engine(self) -> Engine:
        """The read-only engine; raises OpenKernelError with a clear message if unusable."""
        with self._lock:
            if self._engine is None:
                self._engine = open_db(self.db_path)
            return self._engine

    def check(self) -> str | None:
        """None when the database opens, else the message to show."""
        try:
            self.engine()
        except OpenKernelError as err:
            return str(err)
        return None

    def signature(self, task: str, job: str) -> tuple[int, str, int, str]:
        """``(kernels, newest created_at, critiques, state)`` of a job."""
        return queries.job_signature(self.engine(), task, job)

    def job(self, task: str, job: str, signature: tuple | None = None) -> JobData | None:
        """The job's data, reloaded only when its signature changed; None for an unknown job."""
        sig = tuple(signature) if signature is not None else self.signature(task, job)
        key = (task, job)
        cached = self._jobs.get(key)
        if cached is not None and cached.signature == sig:
            return cached
        engine = self.engine()
        runs = queries.job_runs(engine, task, job)
        rows = queries.job_kernels(engine, task, job)
        if not rows and not runs:
            return None
        data = JobData(task, job, sig, rows, runs, best_kernel_id(rows),
                       critiques=queries.job_critiques(engine, task, job),
                       calls=queries.job_calls(engine, task, job))
        with self._lock:
            self._jobs.pop(key, None)
            self._jobs[key] = data
            while len(self._jobs) > self._cache_size:
                self._jobs.pop(next(iter(self._jobs)))
        return data

    def kernel(self, kernel_id: str) -> dict | None:
        """Every field of one kernel, or None."""
        return queries.kernel_detail(self.engine(), kernel_id)

    def suites(self) -> list[dict]:
        """Every benchmark suite, newest first (see ``openkernel.bench.summary``)."""
        return summary.list_suites(self.engine())

    def suite(self, name: str):
        """A suite's table and figures, or None for an unknown suite."""
        return summary.suite_summary(self.engine(), name)

    def jobs(self, search: str = "", offset: int = 0, limit: int = 50) -> tuple[list[dict], int]:
        """A page of the runs listing (see ``queries.list_jobs``)."""
        return queries.list_jobs(self.engine(), search, offset, limit)
