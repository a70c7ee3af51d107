"""attempts admitted onto a worker that went away before it took them: the job is queued again
as its next attempt, which uses none of `max_retries`

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-28 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(
            sa.Column("lost_admissions", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    # Not in a batch: on SQLite that copies the table, which the rows that refer to jobs forbid;
    # SQLite drops a column in place since 3.35.
    op.drop_column("job", "lost_admissions")
