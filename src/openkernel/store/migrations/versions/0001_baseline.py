"""The tables as they were when migrations began (main at 03a9c96).

A database from before then has no ``alembic_version`` and is brought here in place: each
missing table is created, each missing column added as a nullable column (an older database
lacks runs' engine_host/engine_pid/heartbeat_at, kernels' template_results, critiques'
kernel_id..model, or whole tables), each missing index made; rows are kept. On SQLite the
columns go through batch mode, which adds them with ``ALTER TABLE ... ADD COLUMN`` and would
recreate the table for anything SQLite cannot alter. The tables are frozen here, not imported
from ``openkernel.store.tables``: a later change of the tables is a migration of its own.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _baseline() -> sa.MetaData:
    meta = sa.MetaData()
    sa.Table(
        "reference_timings", meta,
        sa.Column('task_digest', sa.String(length=32), primary_key=True),
        sa.Column('hardware', sa.String(length=200), primary_key=True),
        sa.Column('kind', sa.String(length=20), primary_key=True),
        sa.Column('runtime', sa.Float(), nullable=False),
        sa.Column('runtime_stats', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    )
    sa.Table(
        "runs", meta,
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('task_name', sa.String(length=200), nullable=False),
        sa.Column('job_name', sa.String(length=200), nullable=False),
        sa.Column('backend', sa.String(length=20), nullable=False),
        sa.Column('gpu_arch', sa.String(length=100), nullable=False),
        sa.Column('hardware', sa.String(length=200), nullable=False),
        sa.Column('generator', sa.String(length=20), nullable=False),
        sa.Column('models', sa.JSON(), nullable=False),
        sa.Column('config', sa.JSON(), nullable=False),
        sa.Column('task_path', sa.Text(), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('error', sa.Text(), nullable=False),
        sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('engine_host', sa.String(length=200), nullable=False),
        sa.Column('engine_pid', sa.Integer(), nullable=True),
        sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=True),
        sa.Index('ix_runs_job_name', 'job_name'),
        sa.Index('ix_runs_task_job', 'task_name', 'job_name'),
        sa.Index('ix_runs_task_name', 'task_name'),
    )
    sa.Table(
        "suite_problems", meta,
        sa.Column('suite', sa.String(length=200), primary_key=True),
        sa.Column('task_name', sa.String(length=200), primary_key=True),
        sa.Column('job_name', sa.String(length=200), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('path', sa.Text(), nullable=False),
        sa.Column('task_digest', sa.String(length=32), nullable=False),
        sa.Column('outcome', sa.String(length=20), nullable=False),
        sa.Column('error', sa.Text(), nullable=False),
        sa.Column('added_at', sa.DateTime(timezone=True), nullable=False),
    )
    sa.Table(
        "critiques", meta,
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('run_id', sa.Integer(), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column('task_name', sa.String(length=200), nullable=False),
        sa.Column('job_name', sa.String(length=200), nullable=False),
        sa.Column('iteration', sa.Integer(), nullable=False),
        sa.Column('text', sa.Text(), nullable=False),
        sa.Column('source', sa.String(length=20), nullable=False),
        sa.Column('kernel_id', sa.String(length=32), nullable=True),
        sa.Column('label', sa.String(length=40), nullable=True),
        sa.Column('role', sa.String(length=20), nullable=True),
        sa.Column('bottleneck', sa.String(length=40), nullable=True),
        sa.Column('headroom', sa.Float(), nullable=True),
        sa.Column('model', sa.String(length=200), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Index('ix_critiques_run_id', 'run_id'),
        sa.Index('ix_critiques_task_job', 'task_name', 'job_name', 'iteration'),
    )
    sa.Table(
        "kernels", meta,
        sa.Column('id', sa.String(length=32), primary_key=True),
        sa.Column('run_id', sa.Integer(), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column('task_name', sa.String(length=200), nullable=False),
        sa.Column('job_name', sa.String(length=200), nullable=False),
        sa.Column('iteration', sa.Integer(), nullable=False),
        sa.Column('branch', sa.Integer(), nullable=False),
        sa.Column('label', sa.String(length=40), nullable=False),
        sa.Column('parent_id', sa.String(length=32), nullable=True),
        sa.Column('inspiration_ids', sa.JSON(), nullable=False),
        sa.Column('is_program0', sa.Boolean(), nullable=False),
        sa.Column('origin', sa.String(length=20), nullable=False),
        sa.Column('model', sa.String(length=200), nullable=False),
        sa.Column('hardware', sa.String(length=200), nullable=False),
        sa.Column('gpu_arch', sa.String(length=100), nullable=False),
        sa.Column('backend', sa.String(length=20), nullable=False),
        sa.Column('language', sa.String(length=20), nullable=False),
        sa.Column('description', sa.Text(), nullable=False),
        sa.Column('prompt', sa.Text(), nullable=False),
        sa.Column('answer', sa.Text(), nullable=False),
        sa.Column('reference_code', sa.Text(), nullable=False),
        sa.Column('code', sa.Text(), nullable=False),
        sa.Column('user_instructions', sa.Text(), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('compiled', sa.Boolean(), nullable=False),
        sa.Column('correctness', sa.Boolean(), nullable=False),
        sa.Column('runtime', sa.Float(), nullable=False),
        sa.Column('runtime_stats', sa.JSON(), nullable=False),
        sa.Column('runtime_improvement', sa.Float(), nullable=False),
        sa.Column('improve_over_compile', sa.Float(), nullable=False),
        sa.Column('perf_score', sa.Integer(), nullable=False),
        sa.Column('score', sa.Float(), nullable=False),
        sa.Column('features', sa.JSON(), nullable=False),
        sa.Column('profiler_data', sa.JSON(), nullable=False),
        sa.Column('template_results', sa.JSON(), nullable=True),
        sa.Column('metadata', sa.JSON(), nullable=False),
        sa.Column('eval_log', sa.Text(), nullable=False),
        sa.Column('generation_log', sa.Text(), nullable=False),
        sa.Column('tokens_used', sa.Integer(), nullable=False),
        sa.Column('generation_s', sa.Float(), nullable=False),
        sa.Column('evaluation_s', sa.Float(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('evaluated_at', sa.DateTime(timezone=True), nullable=True),
        sa.Index('ix_kernels_job_candidates', 'task_name', 'job_name', 'is_program0', 'correctness', 'score', 'status', 'runtime_improvement', 'created_at'),
        sa.Index('ix_kernels_run_id', 'run_id'),
        sa.Index('ix_kernels_status', 'status'),
        sa.Index('ix_kernels_task_arch_score', 'task_name', 'gpu_arch', 'score'),
        sa.Index('ix_kernels_task_job', 'task_name', 'job_name'),
    )
    sa.Table(
        "llm_calls", meta,
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('run_id', sa.Integer(), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column('task_name', sa.String(length=200), nullable=False),
        sa.Column('job_name', sa.String(length=200), nullable=False),
        sa.Column('iteration', sa.Integer(), nullable=False),
        sa.Column('kernel_id', sa.String(length=32), nullable=True),
        sa.Column('label', sa.String(length=40), nullable=False),
        sa.Column('model', sa.String(length=200), nullable=False),
        sa.Column('purpose', sa.String(length=20), nullable=False),
        sa.Column('prompt_tokens', sa.Integer(), nullable=False),
        sa.Column('completion_tokens', sa.Integer(), nullable=False),
        sa.Column('cost_usd', sa.Float(), nullable=False),
        sa.Column('price', sa.String(length=20), nullable=False),
        sa.Column('latency_s', sa.Float(), nullable=False),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Index('ix_llm_calls_kernel_id', 'kernel_id'),
        sa.Index('ix_llm_calls_run_id', 'run_id'),
        sa.Index('ix_llm_calls_task_job', 'task_name', 'job_name'),
    )
    return meta


def upgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    for table in _baseline().sorted_tables:
        if not inspector.has_table(table.name):
            table.create(bind)
            continue
        have = {c["name"] for c in inspector.get_columns(table.name)}
        missing = [c for c in table.columns if c.name not in have]
        if missing:
            with op.batch_alter_table(table.name) as batch:
                for column in missing:
                    batch.add_column(sa.Column(column.name, column.type, nullable=True))
        indexes = {ix["name"] for ix in inspector.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(bind)


def downgrade() -> None:
    """Below the baseline there are no tables: drop the baseline's (dependents first). Every
    result goes with them; keep a copy of the database before asking for this."""
    bind = op.get_bind()
    present = set(sa.inspect(bind).get_table_names())
    for table in reversed(_baseline().sorted_tables):
        if table.name in present:
            table.drop(bind)
