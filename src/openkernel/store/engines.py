"""Engines on the results database: a SQLite file or a PostgreSQL URL, to write or read-only.

``paths.kernels_db_path`` is a file path (SQLite in WAL mode) or a SQLAlchemy URL. A
``postgresql://`` URL is opened with psycopg 3 (SQLAlchemy alone would pick psycopg2), every
session in UTC so timestamps compare alike on every host, and a reader's sessions in read-only
transactions (``default_transaction_read_only``), so the dashboard cannot write even with the
engine's role. Put passwords in ``~/.pgpass`` or ``PGPASSWORD`` rather than in the URL: the URL
travels in events and configs (where it is shown, ``db_location.shown`` masks a password).
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.pool import QueuePool

from openkernel.db_location import is_url, shown
from openkernel.errors import OpenKernelError

POSTGRES_HINT = "pip install 'openkernel[postgres]' (psycopg 3)"


def engine_url(path_or_url: str | Path) -> str:
    """The SQLAlchemy URL of a database path or URL (``postgresql://`` means psycopg 3)."""
    text = str(path_or_url)
    if not is_url(text):
        return f"sqlite:///{Path(text).expanduser().resolve()}"
    try:
        url = make_url(text)
    except ArgumentError:
        raise OpenKernelError(f"{shown(text)}: not a database URL") from None
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql", "postgres"))


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for any other URL or an in-memory database)."""
    return Path(url[len("sqlite:///"):]) if url.startswith("sqlite:///") and len(url) > 10 else None


def _finite(value):
    """JSON without NaN or Infinity (PostgreSQL's json rejects them): such a number is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _json_dumps(value) -> str:
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(value))


def _sqlite_pragmas(engine: Engine, readonly: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # pragma: no cover - exercised through every test
        cur = dbapi_conn.cursor()
        if not readonly:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=10000")
        cur.close()


class DamagedDatabase(OpenKernelError):
    """A SQLite file whose pages are damaged (SQLite's ``SQLITE_CORRUPT``): one message naming
    the file, whatever statement met it. SQLite rolls back the statement's transaction, so
    nothing is written into it."""


def damage_message(where: str, detail: str, hint: bool = True) -> str:
    return (f"{where}: the database file is damaged ({detail}); nothing was written to it. "
            + (f"`openkernel db info --db {where}` shows the damage; " if hint else "")
            + "use a copy from before it, or another file (--db, paths.kernels_db_path)")


def _sqlite_damage(engine: Engine, where: str) -> None:
    """Every error of a damaged file's pages becomes a :class:`DamagedDatabase`: without it
    each front end showed SQLAlchemy's text, the statement and its parameters (kernel-code a
    whole INSERT) and exited 1."""

    @event.listens_for(engine, "handle_error")
    def _on_error(context):  # pragma: no cover - exercised through the damaged-file tests
        orig = context.original_exception
        code = getattr(orig, "sqlite_errorcode", 0) & 0xFF
        if isinstance(orig, sqlite3.DatabaseError) and (
                code == 11 or "malformed" in str(orig)):  # SQLITE_CORRUPT
            return DamagedDatabase(damage_message(where, str(orig)))
        return None


def _postgres(url: str, readonly: bool, shown_as: str) -> Engine:
    try:
        import psycopg  # noqa: F401 - only to say what is missing, in one line
    except ImportError:
        raise OpenKernelError(f"{shown_as}: PostgreSQL needs psycopg 3: {POSTGRES_HINT}") from None
    options = "-c TimeZone=UTC" + (" -c default_transaction_read_only=on" if readonly else "")
    engine = create_engine(url, connect_args={"options": options, "connect_timeout": 10},
                           json_serializer=_json_dumps, pool_pre_ping=True)
    try:
        with engine.connect():
            pass
    except OperationalError as err:
        engine.dispose()
        reason = str(err.orig).strip().splitlines()[0] if err.orig else str(err)
        raise OpenKernelError(f"{shown_as}: cannot connect to PostgreSQL ({reason})") from None
    return engine


def writer(path_or_url: str | Path) -> Engine:
    """The engine's own engine (the Store's): WAL on SQLite, UTC sessions on PostgreSQL."""
    url = engine_url(path_or_url)
    if is_postgres(url):
        return _postgres(url, readonly=False, shown_as=shown(path_or_url))
    engine = create_engine(url)
    if url.startswith("sqlite"):
        _sqlite_pragmas(engine, readonly=False)
        _sqlite_damage(engine, shown(path_or_url))
    return engine


# SQLITE_CANTOPEN and SQLITE_READONLY (the primary codes under any extended one).
_CANNOT_OPEN = (14, 8)


def readonly_uri(db_file: Path) -> str:
    """The URI that reads ``db_file`` without writing anything.

    ``mode=ro`` first: it sees a live engine's writes. A WAL database in a folder the reader
    cannot write (a read-only mount, another user's folder) cannot be opened so, since SQLite
    would create its ``-shm`` file there; then ``immutable=1``, which reads the file as it is
    (no engine can be writing into such a folder anyway).
    """
    path = quote(str(db_file))
    uri = f"file:{path}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except sqlite3.OperationalError as err:
        if (getattr(err, "sqlite_errorcode", 0) & 0xFF) in _CANNOT_OPEN:
            return f"file:{path}?mode=ro&immutable=1"
    except sqlite3.DatabaseError:
        pass  # not SQLite at all: the caller says so when it reads
    return uri


def reader(path_or_url: str | Path) -> Engine:
    """An engine that cannot write: SQLite opened ``mode=ro``, PostgreSQL in read-only
    transactions (a SQLite file in a read-only place: ``readonly_uri``). Raises
    OpenKernelError for a missing file or an unreachable server."""
    if is_url(path_or_url):
        url = engine_url(path_or_url)
        if is_postgres(url):
            return _postgres(url, readonly=True, shown_as=shown(path_or_url))
        db_file = sqlite_file(url)
        if db_file is None:
            raise OpenKernelError(f"{shown(path_or_url)}: only SQLite files and PostgreSQL URLs are read")
    else:
        db_file = Path(path_or_url).expanduser()
    if not db_file.is_file():
        raise OpenKernelError(f"{db_file}: no such database")
    uri = readonly_uri(db_file.resolve())

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    # A pool of its own: "sqlite://" alone means SingletonThreadPool, which closes other threads'
    # connections once five threads have one, mid-query (the dashboard serves each request on
    # its own thread: closed-database errors, even segfaults).
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool)
    _sqlite_pragmas(engine, readonly=True)
    _sqlite_damage(engine, str(db_file))
    return engine


def damage(engine: Engine) -> str:
    """What SQLite's quick check finds wrong in a SQLite engine's file ("" when nothing; every
    page is read, so it takes as long as reading the file)."""
    if engine.dialect.name != "sqlite":
        return ""
    try:
        with engine.connect() as conn:
            found = [r[0] for r in conn.exec_driver_sql("PRAGMA quick_check(5)")]
    except DamagedDatabase as err:
        return str(err).split(" (", 1)[1].split(");", 1)[0]
    return "" if found == ["ok"] else "; ".join(found)


__all__ = ["DamagedDatabase", "damage", "engine_url", "is_postgres", "is_url", "reader", "shown",
           "sqlite_file", "writer"]
