"""the dispatcher: its lease, reservations, owner policies; a queued job's position and reason

Revision ID: 0013
Revises: 0011
Create Date: 2026-11-25 08:00:00.000000
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0013"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("queue_position", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("pending_reason", sqlmodel.AutoString(length=512), nullable=True)
        )
        batch.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))
    lease = op.create_table(
        "dispatcher_lease",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("holder", sqlmodel.AutoString(length=256), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(
        lease, [{"id": 1, "holder": "", "token": 0, "expires_at": datetime(1970, 1, 1, tzinfo=UTC)}]
    )
    op.create_table(
        "job_reservation",
        sa.Column("job_id", sqlmodel.AutoString(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sa.Integer(), nullable=False),
        sa.Column("owner", sqlmodel.AutoString(length=128), nullable=False),
        sa.Column("worker", sqlmodel.AutoString(length=256), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("admitted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("released_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", "attempt", "node"),
    )
    op.create_index("ix_job_reservation_released_at", "job_reservation", ["released_at"])
    op.create_index(
        "ix_job_reservation_owner_admitted_at", "job_reservation", ["owner", "admitted_at"]
    )
    op.create_table(
        "owner_policy",
        sa.Column("owner", sqlmodel.AutoString(length=128), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("max_devices", sa.Integer(), nullable=True),
        sa.Column("max_device_hours", sa.Float(), nullable=True),
        sa.Column("max_priority", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("owner"),
    )


def downgrade() -> None:
    op.drop_table("owner_policy")
    op.drop_index("ix_job_reservation_owner_admitted_at", table_name="job_reservation")
    op.drop_index("ix_job_reservation_released_at", table_name="job_reservation")
    op.drop_table("job_reservation")
    op.drop_table("dispatcher_lease")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("preemptions")
        batch.drop_column("pending_reason")
        batch.drop_column("queue_position")
