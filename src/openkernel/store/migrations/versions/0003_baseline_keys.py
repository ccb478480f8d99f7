"""Reference timings keyed by what determines them, and what a suite's problem spent.

``reference_timings`` gains ``environment`` (a digest of the workers' torch, Triton and CUDA
versions, backend flags and compiler settings) as part of its primary key: timings are reused
only where all of that is the same. Older rows get "" and are never reused (their environment
is unknown) but stay readable, so older suites keep their baselines in their tables.
``suite_problems`` gains ``costs`` (probe and baseline seconds; NULL on older rows).

Revision ID: 0003_baseline_keys
Revises: 0002_kernel_author
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_baseline_keys"
down_revision = "0002_kernel_author"
branch_labels = None
depends_on = None

_KEY = ["task_digest", "hardware", "kind"]
_PK = "reference_timings_pkey"  # PostgreSQL's own name for the baseline's primary key


def upgrade() -> None:
    column = sa.Column("environment", sa.String(length=64), nullable=False, server_default="")
    if op.get_bind().dialect.name == "sqlite":  # a new primary key: the table is copied
        column.primary_key = True
        with op.batch_alter_table("reference_timings", recreate="always") as batch:
            batch.add_column(column)
            batch.create_primary_key(_PK, [*_KEY, "environment"])
    else:
        op.add_column("reference_timings", column)
        op.drop_constraint(_PK, "reference_timings", type_="primary")
        op.create_primary_key(_PK, "reference_timings", [*_KEY, "environment"])
    with op.batch_alter_table("suite_problems") as batch:
        batch.add_column(sa.Column("costs", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Back to one row per task, hardware and kind: the newest row of each is kept."""
    with op.batch_alter_table("suite_problems") as batch:
        batch.drop_column("costs")
    bind = op.get_bind()
    table = sa.table("reference_timings", *(sa.column(c) for c in [*_KEY, "environment",
                                                                   "created_at"]))
    rows = bind.execute(sa.select(table).order_by(table.c.created_at)).all()
    newest = {tuple(r[:3]): r.environment for r in rows}
    for r in rows:
        if newest[tuple(r[:3])] != r.environment:
            bind.execute(table.delete().where(*(table.c[c] == r._mapping[c] for c in _KEY),
                                              table.c.environment == r.environment))
    if bind.dialect.name == "sqlite":
        with op.batch_alter_table("reference_timings", recreate="always") as batch:
            batch.drop_column("environment")
            batch.create_primary_key(_PK, _KEY)
    else:
        op.drop_constraint(_PK, "reference_timings", type_="primary")
        op.drop_column("reference_timings", "environment")
        op.create_primary_key(_PK, "reference_timings", _KEY)
