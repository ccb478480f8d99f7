"""Alembic's entry: always handed a connection by ``openkernel.store.migrate`` (no alembic.ini).

``render_as_batch``: a revision written with ``alembic revision --autogenerate`` alters SQLite
tables in batch mode (copy and move), since SQLite's ALTER TABLE does little.
"""

from alembic import context

from openkernel.store.tables import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True,
                  compare_type=True)
with context.begin_transaction():
    context.run_migrations()
