"""multi-node jobs: the nodes of each attempt, and the node of each log line

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 09:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_node",
        sa.Column("job_id", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sa.Integer(), nullable=False),
        sa.Column("worker", sqlmodel.sql.sqltypes.AutoString(length=256), nullable=False),
        sa.Column("host", sqlmodel.sql.sqltypes.AutoString(length=256), nullable=False),
        sa.Column("endpoint", sqlmodel.sql.sqltypes.AutoString(length=300), nullable=True),
        sa.Column("state", sqlmodel.sql.sqltypes.AutoString(length=16), nullable=False),
        sa.Column("joined_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("last_heartbeat", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("failed_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("finished_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_reason", sqlmodel.sql.sqltypes.AutoString(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["job.id"]),
        sa.PrimaryKeyConstraint("job_id", "attempt", "node"),
    )
    with op.batch_alter_table("log_line", schema=None) as batch_op:
        batch_op.add_column(sa.Column("node", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("log_line", schema=None) as batch_op:
        batch_op.drop_column("node")
    op.drop_table("job_node")
