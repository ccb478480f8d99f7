"""Trace capture during a search: the writer of one run, with the session's values kept
current (best kernel, tokens, cost, time) so every row says where the job stood."""

from __future__ import annotations

import time

from openkernel.costs import Spend
from openkernel.search.archive import Archive
from openkernel.store import Store
from openkernel.store.traces import Session, TraceWriter, session_id


class JobTraces:
    """Wraps a TraceWriter; see ``store.traces`` for the layout and the schema."""

    def __init__(self, writer: TraceWriter, earlier_s: float) -> None:
        self.writer = writer
        self._earlier_s = earlier_s  # wall time of the job's earlier runs
        self._started = time.monotonic()

    @classmethod
    def open(cls, root: str, store: Store, run_id: int, session: Session) -> "JobTraces":
        """Raises ConfigError without pyarrow, OSError for a folder it cannot make."""
        runs = store.job_runs(session.problem, session.job_name)
        earlier = sum((r.finished_at - r.started_at).total_seconds() for r in runs
                      if r.finished_at and r.started_at and r.id != run_id)
        session.session_id = session_id(session.problem, session.job_name,
                                        runs[0].started_at if runs else None)
        return cls(TraceWriter(root, session), earlier)

    @property
    def folder(self):
        return self.writer.folder

    def _update(self, status: str, archive: Archive, spend: Spend) -> None:
        session, best = self.writer.session, archive.best
        session.final_speedup = archive.best_speedup
        session.final_kernel_id = best.id if best else ""
        session.final_kernel = best.code if best else ""
        session.total_tokens, session.total_cost_usd = spend.tokens, spend.cost_usd
        session.unpriced_calls = spend.unpriced_calls
        session.total_time_seconds = self._earlier_s + time.monotonic() - self._started
        session.session_status = status

    def add(self, fields: dict, became_best: bool, archive: Archive, spend: Spend) -> None:
        """One judged candidate's row, with the session's values so far."""
        self._update("running", archive, spend)
        self.writer.add(fields, became_best)

    def drop(self, kernel_id: str) -> None:
        """A candidate's row is gone from the database (a retried generation failure)."""
        self.writer.drop(kernel_id)

    def finish(self, status: str, archive: Archive, spend: Spend) -> int:
        """The final session values in every file of the job; returns how many files."""
        self._update(status, archive, spend)
        return self.writer.finish()
