"""a job's warnings: what went wrong without failing it (ranks that never formed one process
group, nothing recorded at all, a best_metric never reported)

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("warnings", sa.JSON(), nullable=False, server_default="[]"))


def downgrade() -> None:
    # Not in a batch: on SQLite that copies the table, which the rows that refer to jobs forbid;
    # SQLite drops a column in place since 3.35.
    op.drop_column("job", "warnings")
