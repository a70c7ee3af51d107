"""when an event stream last watched a job: its supervisor stores the ranks' output every poll
while one does, once a second otherwise

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 08:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(
            sa.Column("watched_at", sqlmodel.sql.sqltypes.UTCDateTime(), nullable=True)
        )


def downgrade() -> None:
    # Not in a batch: on SQLite that copies the table, which the rows that refer to jobs forbid;
    # SQLite drops a column in place since 3.35.
    op.drop_column("job", "watched_at")
