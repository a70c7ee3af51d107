"""metric rollups keep their extremes whole: step, epoch, ts and attempt of the minimum and
the maximum, so a downsampled chart reads no metric point

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 12:00:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FIELDS = {"step": sa.Integer(), "epoch": sa.Integer(), "ts": sa.Float(), "attempt": sa.Integer()}
NOT_NULL = ("ts", "attempt")
ENDS = ("min", "max")


def upgrade() -> None:
    with op.batch_alter_table("metric_rollup") as batch:
        for end in ENDS:
            for field, type_ in FIELDS.items():
                batch.add_column(sa.Column(f"{end}_{field}", type_, nullable=True))
    _backfill()
    with op.batch_alter_table("metric_rollup") as batch:
        for end in ENDS:
            for field in NOT_NULL:
                batch.alter_column(f"{end}_{field}", existing_type=FIELDS[field], nullable=False)


def _backfill() -> None:
    """Each existing rollup row's extremes, read from their points (one index lookup each, on
    `ix_metric_point_job_seq`); a row whose point is gone could not answer a chart and goes
    (retention and job deletion remove points and rollups together, so none is expected)."""
    for end in ENDS:
        columns = ", ".join(f"{end}_{field}" for field in FIELDS)
        op.execute(
            f"UPDATE metric_rollup SET ({columns}) = (SELECT {', '.join(FIELDS)} "
            "FROM metric_point WHERE metric_point.job_id = metric_rollup.job_id "
            f"AND metric_point.seq = metric_rollup.{end}_seq)"
        )
    op.execute("DELETE FROM metric_rollup WHERE min_ts IS NULL OR max_ts IS NULL")


def downgrade() -> None:
    with op.batch_alter_table("metric_rollup") as batch:
        for end in ENDS:
            for field in FIELDS:
                batch.drop_column(f"{end}_{field}")
