"""Bringing a results database to the newest tables with Alembic, when the engine opens it.

The revisions live in ``migrations/versions``; the first (``0001``) is the tables as they were
when migrations began, and also upgrades a database written before then (no
``alembic_version`` table) in place. Several engines may open one PostgreSQL database at once
(one per host): an advisory lock held for the migration's transaction makes the others wait,
then find nothing left to do; on SQLite the migration's transaction takes the write lock
first. Only the engine migrates; readers (the dashboard) never do.

A new revision: change ``tables.py`` and write the revision beside ``0001`` (alter tables in
``op.batch_alter_table``, so SQLite can); tests/store/test_migrations.py checks that the
migrated tables equal ``tables.py``, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from openkernel.errors import OpenKernelError

MIGRATIONS = Path(__file__).with_name("migrations")
_PG_LOCK = 0x6F6B5F6D6967  # one key for every openkernel database on a server: migrations are rare


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head() -> str:
    """The newest revision this openkernel knows."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def known() -> set[str]:
    """Every revision this openkernel knows."""
    return {s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions()}


def revision(conn: Connection) -> str | None:
    """The database's revision (None: empty, or written before migrations)."""
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> str | None:
    """Migrate the database to the newest revision; returns the revision it had before."""
    scripts = ScriptDirectory.from_config(_config())
    newest = scripts.get_current_head()
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            if revision(conn) == newest:  # the common case: no write lock taken for nothing
                return newest
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK})")
        elif conn.dialect.name == "sqlite":
            # The write lock before the revision is read: Python's sqlite3 would begin only at
            # the first INSERT, so two engines opening one new file (a run, and a reader
            # polling it) both saw an old revision and both ran its DDL ("duplicate column").
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        before = revision(conn)
        if before is not None and before not in {s.revision for s in scripts.walk_revisions()}:
            # Written by a newer openkernel (another host, say): never guess at its tables.
            raise OpenKernelError(f"the database is at revision {before}, newer than this "
                                  f"openkernel knows ({newest}): upgrade openkernel here")
        if before != newest:
            command.upgrade(_config(conn), "head")
    return before
