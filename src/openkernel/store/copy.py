"""`openkernel db copy`: a results database moved between SQLite and PostgreSQL, either way.

Both ends are opened as the engine opens them (``Store``): the source is migrated first, the
destination made and migrated. Then each run is copied with its kernels, critiques and model
calls in one transaction of the destination, read and written ``batch`` rows at a time, then
the reference timings, suite problems and Inductor captures. The integer ids the destination
hands out (runs, critiques, model calls) are its own, and a run's rows follow it to its new
id; kernel ids are kept (the rows that name a kernel keep naming it).

Nothing is copied twice: a run already in the destination (the same task, job, start, host
and process) is skipped, as is a reference timing, suite problem or capture with the same
key. So the same command, run again after an interruption, resumes: the destination holds
whole runs only.
A destination holding anything that is not the source's is refused unless ``append`` (the
source's rows are then added beside it).

The copy is verified afterwards, table by table: rows counted at both ends, and a digest of the
rows' content (sorted row hashes) without the ids the destination hands out (a run's identity
stands for its id), so source and destination of a whole copy show the same digest. With
``append``, each source row must be found in the destination.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import Float, Table, func, insert, select
from sqlalchemy.engine import Connection, Engine

from openkernel.errors import OpenKernelError
from openkernel.store.db import Store
from openkernel.store.engines import _finite, engine_url, is_url, shown
from openkernel.store.tables import Base

_T = Base.metadata.tables
_RUNS = _T["runs"]
_RUN_ROWS = (_T["kernels"], _T["critiques"], _T["llm_calls"])  # follow their run
_KEYED = (_T["reference_timings"], _T["suite_problems"],  # copied by their own keys
          _T["inductor_captures"])
_HANDED_OUT = {"runs", "critiques", "llm_calls"}  # tables whose integer ids the database picks


@dataclass
class TableCheck:
    """One table after the copy: rows and digest at each end, source rows not found."""

    table: str
    source_rows: int
    destination_rows: int
    source_digest: str
    destination_digest: str
    missing: int

    @property
    def ok(self) -> bool:
        return self.missing == 0


@dataclass
class CopyReport:
    source: str
    destination: str
    runs: int = 0  # in the source
    runs_copied: int = 0
    runs_there: int = 0  # already in the destination: skipped
    rows: Counter = field(default_factory=Counter)  # copied, per table
    checks: list[TableCheck] = field(default_factory=list)
    appended: bool = False

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def copy_database(source: str | Path, destination: str | Path, *, append: bool = False,
                  batch: int = 500, progress: Callable[[str], None] | None = None) -> CopyReport:
    """Copy every openkernel row of ``source`` into ``destination`` and verify it.

    Args:
        source: A SQLite file or database URL; migrated first.
        destination: A SQLite file (made if missing) or database URL (the database must exist).
        append: Add to a destination that holds rows not from the source.
        batch: Rows read and written at a time.
        progress: Hears a line after each run and table copied.

    Raises:
        OpenKernelError: Bad input (a missing source, the same database twice, a non-empty
            destination without ``append``, a row the destination refuses).
    """
    say = progress or (lambda _line: None)
    if not is_url(str(source)) and not Path(source).expanduser().is_file():
        raise OpenKernelError(f"{source}: no such database")
    if engine_url(source) == engine_url(destination):
        raise OpenKernelError(f"{shown(source)}: the source and the destination are the same "
                              "database")
    src = Store(source)
    try:
        dst = Store(destination)
    except BaseException:
        src.close()
        raise
    report = CopyReport(src.shown, dst.shown, appended=append)
    try:
        with src.engine.connect() as read:
            _refuse_foreign(read, dst, src.shown, append)
            _copy_runs(read, dst, report, batch, say)
            for table in _KEYED:
                _copy_keyed(read, dst, table, report, batch, say)
        report.checks = verify(src.engine, dst.engine, append)
    finally:
        src.close()
        dst.close()
    return report


def _refuse_foreign(read: Connection, dst: Store, source: str, append: bool) -> None:
    """A destination with rows the source does not have is another database: not without
    --append. One holding only the source's rows is an earlier copy: it is resumed."""
    with dst.engine.connect() as there:
        theirs = set(_run_identities(there).values())
        if not theirs and not any(_count(there, t) for t in _KEYED):
            return
        foreign = len(theirs - set(_run_identities(read).values()))
        for table in _KEYED:
            keys = set(_keys(read, table))
            foreign += sum(key not in keys for key in _keys(there, table))
        kernels = _count(there, _T["kernels"])
    if foreign and not append:
        raise OpenKernelError(
            f"{dst.shown} is not empty: it holds {len(theirs)} run(s) and {kernels} kernel(s), "
            f"{foreign} row(s) of them not from {source}; pass --append to add the source's "
            f"rows beside them (none is copied twice)")


def _copy_runs(read: Connection, dst: Store, report: CopyReport, batch: int, say) -> None:
    runs = list(read.execute(select(_RUNS).order_by(_RUNS.c.id)).mappings())
    report.runs = len(runs)
    with dst.engine.connect() as there:
        there_now = set(_run_identities(there).values())
    for n, run in enumerate(runs, 1):
        if _identity(run) in there_now:
            report.runs_there += 1
            continue
        copied = Counter()
        with dst.engine.begin() as write:  # the run and its rows, or nothing of them
            new_id = write.execute(insert(_RUNS).values(
                **_row_out(run, dst, drop_id=True))).inserted_primary_key[0]
            for table in _RUN_ROWS:
                q = (select(table).where(table.c.run_id == run["id"])
                     .order_by(*table.primary_key).execution_options(yield_per=batch))
                for part in read.execute(q).mappings().partitions(batch):
                    write.execute(insert(table), [
                        {**_row_out(r, dst, drop_id=table.name in _HANDED_OUT), "run_id": new_id}
                        for r in part])
                    copied[table.name] += len(part)
        report.runs_copied += 1
        report.rows.update(copied, runs=1)
        say(f"run {n}/{len(runs)} {run['task_name']}/{run['job_name']}: "
            f"{copied['kernels']} kernel(s), {copied['critiques']} critique(s), "
            f"{copied['llm_calls']} model call(s)")


def _copy_keyed(read: Connection, dst: Store, table: Table, report: CopyReport, batch: int,
                say) -> None:
    with dst.engine.connect() as there:
        there_now = set(_keys(there, table))
    q = select(table).order_by(*table.primary_key).execution_options(yield_per=batch)
    for part in read.execute(q).mappings().partitions(batch):
        fresh = [_row_out(r, dst) for r in part if _key(r, table) not in there_now]
        if fresh:
            with dst.engine.begin() as write:
                write.execute(insert(table), fresh)
            report.rows[table.name] += len(fresh)
    say(f"{table.name}: {report.rows[table.name]} row(s) copied")


# -- verification ------------------------------------------------------------------------------
def verify(source: Engine, destination: Engine, append: bool = False) -> list[TableCheck]:
    """Each table's rows and digest at both ends, and how many source rows the destination
    lacks (a whole copy: any difference in content or count counts)."""
    checks = []
    with source.connect() as a, destination.connect() as b:
        for table in Base.metadata.sorted_tables:
            mine, theirs = _row_hashes(a, table), _row_hashes(b, table)
            lacking = sum((Counter(mine) - Counter(theirs)).values())
            if not append:
                lacking = max(lacking, abs(len(theirs) - len(mine)))
            checks.append(TableCheck(table.name, len(mine), len(theirs), _digest(mine),
                                     _digest(theirs), lacking))
    return checks


def table_digest(conn: Connection, table: Table) -> tuple[int, str]:
    """A table's rows and the digest of their content (as :func:`verify` compares them)."""
    hashes = _row_hashes(conn, table)
    return len(hashes), _digest(hashes)


def _row_hashes(conn: Connection, table: Table) -> list[bytes]:
    runs = _run_identities(conn) if "run_id" in table.c else {}
    floats = {c.name for c in table.c if isinstance(c.type, Float)}
    out = []
    for row in conn.execute(select(table).execution_options(yield_per=2000)).mappings():
        values = {}
        for name, value in row.items():
            if name == "id" and table.name in _HANDED_OUT:
                continue
            if name == "run_id":
                value = runs.get(value)
            elif name in floats and value is not None:
                value = float(value)
            values[name] = _canonical(value)
        text = json.dumps(values, sort_keys=True, ensure_ascii=False, default=str)
        out.append(hashlib.sha256(text.encode()).digest()[:16])
    return out


def _digest(hashes: list[bytes]) -> str:
    return hashlib.sha256(b"".join(sorted(hashes))).hexdigest()[:16]


def _canonical(value):
    """One form of a value at either end: UTC time text, NUL-free text, JSON without NaN."""
    if isinstance(value, datetime):
        return _utc(value)
    if isinstance(value, float) and value != value:  # NaN: SQLite keeps it as NULL
        return None
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, (dict, list)):
        return json.loads(json.dumps(_finite(value), default=str).replace("\\u0000", "\ufffd"))
    return value


# -- rows and identities -----------------------------------------------------------------------
def _row_out(row, dst: Store, drop_id: bool = False) -> dict:
    """A source row as the destination takes it (PostgreSQL text cannot hold NUL, as in
    ``Store.add_kernel``; its json no NaN)."""
    out = {k: v for k, v in row.items() if not (drop_id and k == "id")}
    if dst.postgres:
        out = {k: v.replace("\x00", "\ufffd") if isinstance(v, str) else v
               for k, v in out.items()}
    return out


def _utc(moment: datetime | None) -> str | None:
    """A timestamp as naive UTC text (SQLite keeps naive UTC; PostgreSQL answers aware)."""
    if moment is None:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.isoformat(timespec="microseconds")


def _identity(run) -> tuple:
    """What makes a run the same run in two databases (its id does not)."""
    return (run["task_name"], run["job_name"], _utc(run["started_at"]),
            run.get("engine_host") or "", run.get("engine_pid"))


def _run_identities(conn: Connection) -> dict[int, tuple]:
    return {r["id"]: _identity(r) for r in conn.execute(select(_RUNS)).mappings()}


def _key(row, table: Table) -> tuple:
    return tuple(row[c.name] for c in table.primary_key)


def _keys(conn: Connection, table: Table) -> list[tuple]:
    return [tuple(r) for r in conn.execute(select(*table.primary_key))]


def _count(conn: Connection, table: Table) -> int:
    return conn.execute(select(func.count()).select_from(table)).scalar_one()
