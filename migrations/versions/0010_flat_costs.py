"""flat costs: job list indexes, a tag table, metric rollups, log byte counts, retention marks

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_INDEXES = {
    "ix_job_created_id": ["created_at", "id"],
    "ix_job_state_created_id": ["state", "created_at", "id"],
    "ix_job_owner_created_id": ["owner", "created_at", "id"],
    "ix_job_owner_state_created_id": ["owner", "state", "created_at", "id"],
    "ix_job_name_created_id": ["name", "created_at", "id"],
}


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(
            sa.Column("log_bytes", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("log_lines_dropped", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("metrics_pruned_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
        batch.add_column(
            sa.Column("logs_pruned_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
    for name, columns in JOB_INDEXES.items():
        op.create_index(name, "job", columns)
    op.create_table(
        "job_tag",
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("key", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("value", sqlmodel.sql.sqltypes.AutoString(length=1024), nullable=False),
        sa.Column("created_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"]),
        sa.PrimaryKeyConstraint("job_id", "key"),
    )
    op.create_index(
        "ix_job_tag_key_value_created", "job_tag", ["key", "value", "created_at", "job_id"]
    )
    op.create_table(
        "metric_rollup",
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("name", sqlmodel.sql.sqltypes.AutoString(length=128), nullable=False),
        sa.Column("bucket", sa.BigInteger(), nullable=False),
        sa.Column("min_value", sa.Float(), nullable=False),
        sa.Column("min_seq", sa.BigInteger(), nullable=False),
        sa.Column("max_value", sa.Float(), nullable=False),
        sa.Column("max_seq", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"]),
        sa.PrimaryKeyConstraint("job_id", "width", "name", "bucket"),
    )
    _copy_tags()
    _count_log_bytes()


def _copy_tags() -> None:
    """The tags of the jobs already stored, read from their specs."""
    bind = op.get_bind()
    job = sa.table(
        "job",
        sa.column("id", sa.String()),
        sa.column("spec", sa.JSON()),
        sa.column("created_at", sqlmodel.sql.sqltypes.UTCDateTime()),
    )
    tag = sa.table(
        "job_tag",
        sa.column("job_id", sa.String()),
        sa.column("key", sa.String()),
        sa.column("value", sa.String()),
        sa.column("created_at", sqlmodel.sql.sqltypes.UTCDateTime()),
    )
    rows = []
    for job_id, spec, created_at in bind.execute(sa.select(job.c.id, job.c.spec, job.c.created_at)):
        for key, value in ((spec or {}).get("tags") or {}).items():
            rows.append({"job_id": job_id, "key": key, "value": value, "created_at": created_at})
    if rows:
        bind.execute(sa.insert(tag), rows)


def _count_log_bytes() -> None:
    op.execute(
        "UPDATE job SET log_bytes = (SELECT COALESCE(SUM(LENGTH(line)), 0) FROM log_line "
        "WHERE log_line.job_id = job.id)"
    )


def downgrade() -> None:
    op.drop_table("metric_rollup")
    op.drop_index("ix_job_tag_key_value_created", table_name="job_tag")
    op.drop_table("job_tag")
    for name in JOB_INDEXES:
        op.drop_index(name, table_name="job")
    with op.batch_alter_table("job") as batch:
        for column in ("logs_pruned_at", "metrics_pruned_at", "log_lines_dropped", "log_bytes"):
            batch.drop_column(column)
