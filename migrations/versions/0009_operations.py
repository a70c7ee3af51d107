"""webhooks and their deliveries, the audit log, ranks' stacks, and a trigram index for log search

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 08:00:00.000000
"""

import logging
from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")
UTC_TIME = sqlmodel.sql.sqltypes.UTCDateTime
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LOG_TRGM_INDEX = "ix_log_line_line_trgm"


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("stacks_requested_at", UTC_TIME(), nullable=True))
    op.create_table(
        "webhook",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False, index=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("all_jobs", sa.Boolean(), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("created_at", UTC_TIME(), nullable=False),
    )
    op.create_table(
        "webhook_delivery",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("webhook_id", sa.String(32), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", UTC_TIME(), nullable=False),
        sa.Column("next_attempt_at", UTC_TIME(), nullable=False),
        sa.Column("give_up_at", UTC_TIME(), nullable=True),
        sa.Column("claimed_until", UTC_TIME(), nullable=True),
        sa.Column("last_attempt_at", UTC_TIME(), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", UTC_TIME(), nullable=True),
    )
    op.create_index("ix_webhook_delivery_due", "webhook_delivery", ["status", "next_attempt_at"])
    op.create_index(
        "ix_webhook_delivery_hook_job_position",
        "webhook_delivery",
        ["webhook_id", "job_id", "position"],
    )
    op.create_table(
        "audit_record",
        sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("ts", UTC_TIME(), nullable=False, index=True),
        sa.Column("owner", sa.String(128), nullable=True, index=True),
        sa.Column("kind", sa.String(64), nullable=False, index=True),
        sa.Column("method", sa.String(8), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("target", sa.String(256), nullable=True),
        sa.Column("client", sa.String(64), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
    )
    op.create_table(
        "rank_stack",
        sa.Column("id", BIG_ID, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("node", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("stack", sa.Text(), nullable=False),
        sa.Column("in_collective", sa.Boolean(), nullable=False),
        sa.Column("last_output_ts", sa.Float(), nullable=True),
    )
    op.create_index("ix_rank_stack_job_ts", "rank_stack", ["job_id", "ts"])
    if op.get_bind().dialect.name == "postgresql":
        create_log_trigram_index()


def create_log_trigram_index() -> None:
    """A pg_trgm GIN index on log lines, which serves `LIKE '%q%'` and `~` (log search). The
    extension needs a role that may create it: without, log search scans (still correct)."""
    bind = op.get_bind()
    try:
        with bind.begin_nested():
            bind.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pg_trgm"))
    except sa.exc.DBAPIError as exc:
        log.warning("pg_trgm is not available (%s): log search will scan", exc.orig)
        return
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {LOG_TRGM_INDEX} ON log_line USING gin (line gin_trgm_ops)"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP INDEX IF EXISTS {LOG_TRGM_INDEX}")
    op.drop_index("ix_rank_stack_job_ts", table_name="rank_stack")
    op.drop_table("rank_stack")
    op.drop_table("audit_record")
    op.drop_index("ix_webhook_delivery_hook_job_position", table_name="webhook_delivery")
    op.drop_index("ix_webhook_delivery_due", table_name="webhook_delivery")
    op.drop_table("webhook_delivery")
    op.drop_table("webhook")
    with op.batch_alter_table("job") as batch:
        batch.drop_column("stacks_requested_at")
