"""inductor_captures: the probe's Inductor code, kept per task digest, hardware, software and
TF32 flag (as the reference's baselines are) and reused by later probes.

Revision ID: 0005_inductor_captures
Revises: 0004_llm_call_estimates
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_inductor_captures"
down_revision = "0004_llm_call_estimates"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inductor_captures",
        sa.Column("task_digest", sa.String(length=32), primary_key=True),
        sa.Column("hardware", sa.String(length=200), primary_key=True),
        sa.Column("environment", sa.String(length=64), primary_key=True),
        sa.Column("tf32", sa.Boolean(), primary_key=True),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """The captures go (a later probe makes them again)."""
    op.drop_table("inductor_captures")
