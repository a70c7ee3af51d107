"""a job's launch path (`warm`: its ranks forked from the worker's fork server; `cold`: under
torchrun) and whether its spec named a launcher

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-01 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("launch_path", sa.String(length=8), nullable=True))
        batch.add_column(
            sa.Column("launcher_given", sa.Boolean(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    # Not in a batch: see 0018.
    op.drop_column("job", "launcher_given")
    op.drop_column("job", "launch_path")
