"""The results database: SQLAlchemy 2 tables, SQLite (WAL) by default.

The engine is the only writer (``Store``); the dashboard opens it read-only (``open_readonly``).
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
