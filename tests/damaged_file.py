"""A real run's results database, damaged on purpose (issue 58's tests)."""

from __future__ import annotations

from pathlib import Path


def damage(db: Path, dest: Path) -> Path:
    """A copy of a real run's SQLite file with every page after the first damaged (its b-tree
    page header overwritten): still a SQLite file, its schema page readable, but
    ``PRAGMA integrity_check`` says it is malformed and any table read fails."""
    import shutil

    shutil.copyfile(db, dest)
    data = bytearray(dest.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    for start in range(page, len(data), page):
        data[start:start + 12] = b"\xff" * 12
    dest.write_bytes(bytes(data))
    return dest
