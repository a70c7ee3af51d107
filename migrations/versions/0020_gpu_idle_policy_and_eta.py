"""an owner's idle-GPU policy; a running job's estimated time left (its ETA and when it was
estimated)

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-30 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("owner_policy") as batch:
        batch.add_column(sa.Column("idle_gpu", sa.JSON(), nullable=True))
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("eta_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("eta_at", sa.Float(), nullable=True))


def downgrade() -> None:
    # Not in a batch for the job: on SQLite that copies the table, which the rows that refer to
    # jobs forbid; SQLite drops a column in place since 3.35.
    op.drop_column("job", "eta_at")
    op.drop_column("job", "eta_s")
    op.drop_column("owner_policy", "idle_gpu")
