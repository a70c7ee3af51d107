"""the goodput ledger: each attempt's marks (first step, last progress, checkpoint saves,
evaluations, the last registered checkpoint, the stop) and each ended job's ledger

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-30 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PARTS = (
    "queued",
    "environment",
    "launch",
    "first_step",
    "training",
    "checkpoint_stall",
    "eval",
    "hang",
    "lost_work",
    "retry_gap",
    "teardown",
)


def upgrade() -> None:
    op.create_table(
        "attempt_mark",
        sa.Column("job_id", sqlmodel.AutoString(length=32), primary_key=True),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("node", sa.Integer(), primary_key=True),
        sa.Column("first_step_at", sa.Float(), nullable=True),
        sa.Column("last_progress_at", sa.Float(), nullable=True),
        sa.Column("checkpoint_stall_s", sa.Float(), nullable=False),
        sa.Column("checkpoint_saves", sa.Integer(), nullable=False),
        sa.Column("eval_s", sa.Float(), nullable=False),
        sa.Column("evals", sa.Integer(), nullable=False),
        sa.Column("last_checkpoint_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("hang_since", sa.Float(), nullable=True),
    )
    op.create_table(
        "job_goodput",
        sa.Column("job_id", sqlmodel.AutoString(length=32), primary_key=True),
        sa.Column("owner", sqlmodel.AutoString(length=128), nullable=False),
        sa.Column("queue", sqlmodel.AutoString(length=64), nullable=False),
        sa.Column("name", sqlmodel.AutoString(length=128), nullable=False),
        sa.Column("state", sqlmodel.AutoString(length=16), nullable=False),
        sa.Column("ended_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("device_s", sa.Float(), nullable=False),
        sa.Column("badput_device_s", sa.Float(), nullable=False),
        *(sa.Column(f"{part}_s", sa.Float(), nullable=False) for part in PARTS),
        sa.Column("ledger", sa.JSON(), nullable=False),
    )
    op.create_index("ix_job_goodput_ended_at", "job_goodput", ["ended_at"])
    op.create_index("ix_job_goodput_owner_ended_at", "job_goodput", ["owner", "ended_at"])


def downgrade() -> None:
    op.drop_index("ix_job_goodput_owner_ended_at", table_name="job_goodput")
    op.drop_index("ix_job_goodput_ended_at", table_name="job_goodput")
    op.drop_table("job_goodput")
    op.drop_table("attempt_mark")
