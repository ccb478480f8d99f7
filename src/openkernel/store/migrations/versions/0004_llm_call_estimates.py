"""llm_calls.estimated: whether a call's tokens are litellm's count rather than the server's
(the server sent no usage, or a stream was cut off mid-answer). Earlier calls read False.

Revision ID: 0004_llm_call_estimates
Revises: 0003_baseline_keys
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_llm_call_estimates"
down_revision = "0003_baseline_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.add_column(sa.Column("estimated", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("estimated")
