"""checkpoint.kind, files and manifest: a checkpoint may be a directory

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("checkpoint") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=8), nullable=False, server_default="file")
        )
        batch.add_column(sa.Column("files", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("manifest", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("checkpoint") as batch:
        batch.drop_column("manifest")
        batch.drop_column("files")
        batch.drop_column("kind")
