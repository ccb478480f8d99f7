"""The results database: SQLAlchemy 2 tables, SQLite (WAL) by default, PostgreSQL for many
hosts (a ``postgresql://`` URL), migrated by Alembic.

The engines are the only writers (``Store``), each of its own jobs; the dashboard opens the
database read-only (``open_readonly``).
"""

from openkernel.store.db import Store, engine_url, open_readonly
from openkernel.store.tables import (
    Base,
    Critique,
    Kernel,
    LLMCallRecord,
    ReferenceTiming,
    Run,
    SuiteProblem,
)

__all__ = ["Base", "Critique", "Kernel", "LLMCallRecord", "ReferenceTiming", "Run", "Store",
           "SuiteProblem", "engine_url", "open_readonly"]
