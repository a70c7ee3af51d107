"""the row the readiness check and the reaper write, to learn whether the database takes writes

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-27 20:00:00.000000
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "write_check",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("written_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=False),
        sa.Column("writes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(table, [{"id": 1, "written_at": datetime(1970, 1, 1, tzinfo=UTC), "writes": 0}])


def downgrade() -> None:
    op.drop_table("write_check")
