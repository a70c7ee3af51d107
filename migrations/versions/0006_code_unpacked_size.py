"""uploaded code: the bytes each upload unpacked to, for the per-owner quota

Revision ID: 0006
Revises: 0004
Create Date: 2026-11-25 06:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("code_upload") as batch:
        batch.add_column(
            sa.Column("unpacked_size", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("code_upload") as batch:
        batch.drop_column("unpacked_size")
