"""Kernels from outside the generator: the ``author`` of a candidate ("user" or
"agent:<name>"; empty for the generator's own). Older rows keep NULL, read as "".

Revision ID: 0002_kernel_author
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_kernel_author"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        batch.add_column(sa.Column("author", sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("kernels") as batch:
        batch.drop_column("author")
