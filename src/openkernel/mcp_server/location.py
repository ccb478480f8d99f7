"""Where the MCP server's results database is: said on start and in every answer.

An editor launches the server from wherever it likes, so nothing is relative to that: ``--db``
(a relative file is made absolute once, at start), else ``OPENKERNEL_DB``, else
``kernels.sqlite3`` in the user's data directory (platformdirs). Candidates' scratch
directories go beside a database file (or into the data directory for a URL).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from openkernel.db_location import is_url, shown


def data_dir() -> Path:
    """The user's data directory for openkernel (``~/.local/share/openkernel`` on Linux)."""
    try:
        from platformdirs import user_data_dir
    except ImportError:  # the mcp extra brings it; a bare install still has a place
        base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
        return Path(base) / "openkernel"
    return Path(user_data_dir("openkernel", appauthor=False))


@dataclass(frozen=True)
class DatabaseLocation:
    """The database (a file path or a URL), where that choice came from, and scratch."""

    database: str
    source: str  # "--db" | "OPENKERNEL_DB" | "the user data directory"
    scratch: str

    @property
    def shown(self) -> str:
        """As answers and messages say it (a URL's password masked)."""
        return shown(self.database)

    def overrides(self) -> list[str]:
        """Config overrides that put a job's results and scratch here."""
        return [f"paths.kernels_db_path={self.database}", f"paths.scratch_dir={self.scratch}"]


def resolve(db: str | None, env: dict | None = None) -> DatabaseLocation:
    """``--db``, else ``OPENKERNEL_DB``, else the data directory's ``kernels.sqlite3``."""
    env = os.environ if env is None else env
    if db:
        given, source = db, "--db"
    elif env.get("OPENKERNEL_DB"):
        given, source = env["OPENKERNEL_DB"], "OPENKERNEL_DB"
    else:
        given, source = str(data_dir() / "kernels.sqlite3"), "the user data directory"
    if is_url(given):
        return DatabaseLocation(given, source, str(data_dir() / "scratch"))
    path = Path(given).expanduser().resolve()
    return DatabaseLocation(str(path), source, str(path.parent / "scratch"))
