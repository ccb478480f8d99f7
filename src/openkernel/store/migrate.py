"""Columns added to a table after it shipped, added to an older database in place.

``create_all`` makes missing tables but leaves existing ones as they are; ``add_missing_columns``
adds each column the tables declare and the database lacks, as a nullable column
(``ALTER TABLE ... ADD COLUMN``, which SQLite and PostgreSQL do without rewriting the table).
Renames and type changes are not migrations this can do: use Alembic for those.
"""

from __future__ import annotations

from sqlalchemy import MetaData, inspect
from sqlalchemy.engine import Engine


def add_missing_columns(engine: Engine, metadata: MetaData) -> list[str]:
    """Add what is missing; returns ``table.column`` for each column added."""
    inspector = inspect(engine)
    added = []
    with engine.begin() as conn:
        for table in metadata.sorted_tables:
            if not inspector.has_table(table.name):
                continue
            present = {c["name"] for c in inspector.get_columns(table.name)}
            for column in table.columns:
                if column.name in present:
                    continue
                kind = column.type.compile(engine.dialect)
                conn.exec_driver_sql(f'ALTER TABLE "{table.name}" ADD COLUMN "{column.name}" {kind}')
                added.append(f"{table.name}.{column.name}")
    return added
