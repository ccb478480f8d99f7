"""Exports from a results database: the trace dataset, and instruction pairs for fine-tuning.

``export_traces`` writes the same rows (``store.traces``) a run with ``traces.enabled`` writes
as it goes, one file per job; the keep/discard decisions are found again by replaying each
job's kernels, in the order they were judged, through the search's own archive.
``export_sft`` keeps the best share of each problem's correct model-written candidates as
(prompt, answer) pairs, one JSON object per line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import func, inspect, select
from sqlalchemy.orm import Session as OrmSession

from openkernel.errors import OpenKernelError
from openkernel.search.archive import Archive
from openkernel.search.records import program_from_row
from openkernel.store import Kernel, LLMCallRecord, Run, open_readonly
from openkernel.store.engines import shown
from openkernel.store.traces import (
    Redactor,
    Session,
    job_folder,
    read_dataset,
    row_of,
    rows_for_sft,
    session_id,
    write_table,
)

_COLUMNS = [a.key for a in inspect(Kernel).column_attrs]


def _jobs(s: OrmSession, task: str | None, job: str | None) -> list[tuple[str, str]]:
    q = select(Kernel.task_name, Kernel.job_name).distinct()
    if task:
        q = q.where(Kernel.task_name == task)
    if job:
        q = q.where(Kernel.job_name == job)
    return sorted(s.execute(q).all())


def _has_calls(s: OrmSession) -> bool:
    return inspect(s.connection()).has_table(LLMCallRecord.__tablename__)


def _job_rows(s: OrmSession, task: str, job: str, calls: bool) -> list[dict]:
    """The job's trace rows, each with its keep/discard/error decision found by replay."""
    kernels = list(s.scalars(select(Kernel).where(Kernel.task_name == task, Kernel.job_name == job)
                             .order_by(Kernel.is_program0.desc(),
                                       func.coalesce(Kernel.evaluated_at, Kernel.created_at),
                                       Kernel.iteration, Kernel.branch)))
    runs = list(s.scalars(select(Run).where(Run.task_name == task, Run.job_name == job)
                          .order_by(Run.id)))
    archive = Archive()
    judged = []
    for k in kernels:
        became_best = archive.add(program_from_row(k))
        if not k.is_program0:
            judged.append(({c: getattr(k, c) for c in _COLUMNS}, became_best))
    if calls:
        tokens, cost, unpriced = s.execute(
            select(func.coalesce(func.sum(LLMCallRecord.prompt_tokens
                                          + LLMCallRecord.completion_tokens), 0),
                   func.coalesce(func.sum(LLMCallRecord.cost_usd), 0.0),
                   func.count().filter(LLMCallRecord.price == "unknown"))
            .where(LLMCallRecord.task_name == task, LLMCallRecord.job_name == job)).one()
    else:  # a database from before calls were stored: what the kernels recorded
        tokens = sum(k.tokens_used for k in kernels)
        cost, unpriced = sum(float((k.meta or {}).get("llm", {}).get("cost_usd", 0)) for k in kernels), 0
    best = archive.best
    first, last = (runs[0], runs[-1]) if runs else (None, None)
    session = Session(
        session_id=session_id(task, job, first.started_at if first else None), problem=task,
        job_name=job, hardware=last.hardware if last else "", gpu_arch=last.gpu_arch if last else "",
        backend=first.backend if first else "", generator=last.generator if last else "",
        model=", ".join(dict.fromkeys(m for r in runs for m in (r.models or []))),
        final_speedup=archive.best_speedup, final_kernel_id=best.id if best else "",
        final_kernel=best.code if best else "", total_tokens=int(tokens),
        total_cost_usd=float(cost), unpriced_calls=int(unpriced),
        total_time_seconds=sum((r.finished_at - r.started_at).total_seconds() for r in runs
                               if r.finished_at and r.started_at),
        session_status=last.status if last else "")
    return [row_of(k, session, became_best) for k, became_best in judged]


def trace_rows(db: str | Path, task: str | None = None,
               job: str | None = None) -> Iterator[tuple[str, str, list[dict]]]:
    """(task, job, redacted rows) for each job of the database (or the one asked for)."""
    engine = open_readonly(db, complete=True)  # whole rows: an older database says what it lacks
    redactor = Redactor()
    try:
        with OrmSession(engine) as s:
            calls = _has_calls(s)
            jobs = _jobs(s, task, job)
            if not jobs:
                what = " ".join(filter(None, [task and f"task {task!r}", job and f"job {job!r}"]))
                raise OpenKernelError(f"{shown(db)}: no kernels" + (f" for {what}" if what else ""))
            for t, j in jobs:
                yield t, j, [redactor.row(r) for r in _job_rows(s, t, j, calls)]
    finally:
        engine.dispose()


def export_traces(db: str | Path, out: str | Path, task: str | None = None,
                  job: str | None = None) -> list[tuple[Path, int]]:
    """Write ``<out>/<task>/<job>/job.parquet`` per job; returns (file, rows) for each."""
    written = []
    for t, j, rows in trace_rows(db, task, job):
        if rows:
            path = write_table(job_folder(Path(out), t, j) / "job.parquet", rows)
            written.append((path, len(rows)))
    return written


def export_sft(out: str | Path, top: float = 0.1, db: str | Path | None = None,
               traces: str | Path | None = None, min_speedup: float | None = None) -> list[dict]:
    """Write the SFT pairs as JSONL, from a database or a trace dataset; returns them.
    ``min_speedup`` leaves out kernels slower than that over the reference."""
    if traces is not None:
        folder = Path(traces)
        if not folder.is_dir():
            raise OpenKernelError(f"{folder}: no such trace folder")
        rows = read_dataset(folder).to_pylist()
    else:
        rows = [r for _, _, job_rows in trace_rows(db) for r in job_rows]
    pairs = rows_for_sft(rows, top, min_speedup)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for pair in pairs:
            fh.write(json.dumps(pair, ensure_ascii=False) + "\n")
    return pairs
