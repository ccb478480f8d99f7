"""`openkernel db info` and `openkernel db upgrade`: where a results database is, its schema
revision against this openkernel's, its rows per table; and its migration alone.

``describe`` opens the database read-only (it creates nothing, as every reader); ``upgrade``
migrates it as an engine does when it opens it (``store.migrate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, inspect, select
from sqlalchemy.exc import DatabaseError

from openkernel.errors import OpenKernelError
from openkernel.store import engines, migrate
from openkernel.store.tables import Base

_UPGRADE = "run openkernel db upgrade"


@dataclass
class DatabaseInfo:
    """What ``openkernel db info`` says about one database."""

    where: str  # the file, or the URL without its password
    kind: str  # "SQLite file, 3.2 MiB" or "PostgreSQL 15.4"
    revision: str | None  # the database's (None: no alembic_version)
    head: str  # this openkernel's newest
    rows: dict[str, int]  # openkernel's tables it has, and their rows
    missing: list[str]  # openkernel's tables it lacks

    @property
    def schema(self) -> str:
        """The revision, and what to do about it."""
        if not self.rows:
            return f"none: no openkernel tables ({_UPGRADE})"
        if self.revision is None:
            return f"none: tables written before migrations ({_UPGRADE})"
        if self.revision == self.head:
            return f"{self.revision} (this openkernel's newest)"
        if self.revision in migrate.known():
            return f"{self.revision}, older than this openkernel's {self.head} ({_UPGRADE})"
        return f"{self.revision}, newer than this openkernel knows ({self.head}): upgrade openkernel"

    def lines(self) -> list[tuple[str, str]]:
        out = [("database", self.where), ("kind", self.kind), ("schema", self.schema)]
        out += [(f"rows in {name}", f"{n:,}") for name, n in self.rows.items()]
        if self.rows and self.missing:
            out.append(("missing tables", f"{', '.join(self.missing)} ({_UPGRADE})"))
        return out


def describe(path_or_url: str | Path) -> DatabaseInfo:
    """Describe a database without writing to it (OpenKernelError if it cannot be read)."""
    shown = engines.shown(path_or_url)
    engine = engines.reader(path_or_url)
    try:
        found = engines.damage(engine)  # a damaged file is said first, whatever it holds
        if found:
            raise engines.DamagedDatabase(engines.damage_message(shown, found, hint=False))
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            ours = [t for t in Base.metadata.sorted_tables if t.name in tables]
            rows = {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                    for t in ours}
            revision = migrate.revision(conn)
            if engine.dialect.name == "postgresql":
                kind = f"PostgreSQL {conn.exec_driver_sql('SHOW server_version').scalar()}"
            else:
                kind = f"SQLite file, {_sqlite_size(path_or_url) / 2**20:.1f} MiB"
    except DatabaseError as err:
        raise OpenKernelError(f"{shown}: not a database openkernel can read ({err.orig})") from None
    finally:
        engine.dispose()
    missing = [t.name for t in Base.metadata.sorted_tables if t.name not in tables]
    return DatabaseInfo(shown, kind, revision, migrate.head(), rows, missing)


def upgrade(path_or_url: str | Path) -> tuple[str | None, str, str]:
    """Migrate a database to this openkernel's tables; returns (revision before, after, where)."""
    shown = engines.shown(path_or_url)
    engine = engines.writer(path_or_url)
    try:
        before = migrate.upgrade(engine)
    except DatabaseError as err:
        raise OpenKernelError(f"{shown}: not an openkernel database ({err.orig})") from None
    finally:
        engine.dispose()
    return before, migrate.head(), shown


def _sqlite_size(path_or_url: str | Path) -> int:
    db_file = engines.sqlite_file(engines.engine_url(path_or_url))
    return db_file.stat().st_size if db_file is not None else 0
