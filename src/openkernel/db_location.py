"""Where the results database is, as given (``paths.kernels_db_path``, ``--db``) and as shown.

No SQLAlchemy here: the TUI shows the location without loading the store.
"""

from __future__ import annotations

import re
from pathlib import Path

_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/:@]*):[^/@]*@")


def is_url(path_or_url: str | Path) -> bool:
    """Whether it is a URL (``postgresql://...``, ``sqlite:///...``) rather than a file path."""
    return "://" in str(path_or_url)


def shown(path_or_url: str | Path) -> str:
    """The path or URL as it may be shown: a password in a URL is masked."""
    return _PASSWORD.sub(r"\1:***@", str(path_or_url))
