"""an append-only event history: retired checkpoints keep their rows; longer event kinds

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 05:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoint", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("deleted_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )
    _event_kind_length(16, 32)


def _event_kind_length(old: int, new: int) -> None:
    with op.batch_alter_table("job_event", schema=None) as batch_op:
        batch_op.alter_column(
            "kind",
            existing_type=sqlmodel.sql.sqltypes.AutoString(length=old),
            type_=sqlmodel.sql.sqltypes.AutoString(length=new),
            existing_nullable=False,
        )


def downgrade() -> None:
    op.execute("DELETE FROM job_event WHERE kind = 'checkpoint_deleted'")
    op.execute("DELETE FROM checkpoint WHERE deleted_at IS NOT NULL")
    _event_kind_length(32, 16)
    with op.batch_alter_table("checkpoint", schema=None) as batch_op:
        batch_op.drop_column("deleted_at")
