"""What a job produces: metric points (and their rollups), log lines, checkpoints, the ranks'
recorded stacks."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Column, Index, Integer, Text
from sqlmodel import Field, SQLModel

from service.models.columns import BigIntPK, utcnow


def history_indexes(table: str, series: str) -> tuple[Index, Index]:
    """The indexes of a history table: (job_id, seq), unique, which the stream and the pages
    read; (job_id, `series`, seq) for one series of it (a metric's name, a rank)."""
    return (
        Index(f"ix_{table}_job_seq", "job_id", "seq", unique=True),
        Index(f"ix_{table}_job_{series}_seq", "job_id", series, "seq"),
    )


class SeqRow(SQLModel):
    """The head of a row that a job's attempt records in its history: its place in the job's
    seq order (the event id)."""

    id: int | None = Field(default=None, primary_key=True, sa_type=BigIntPK)
    job_id: str = Field(foreign_key="job.id", max_length=32)
    seq: int = Field(sa_type=BigInteger)
    attempt: int


class MetricPoint(SeqRow, table=True):
    __tablename__ = "metric_point"
    __table_args__ = history_indexes("metric_point", "name")

    step: int | None = None
    epoch: int | None = None
    name: str = Field(max_length=128)
    value: float
    ts: float


class LogLine(SeqRow, table=True):
    __tablename__ = "log_line"
    __table_args__ = history_indexes("log_line", "rank")

    rank: int
    # Which node of a multi-node job wrote it (0 for a single-node job); `rank` is global.
    node: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    ts: float
    line: str = Field(sa_column=Column(Text, nullable=False))


class Checkpoint(SQLModel, table=True):
    __tablename__ = "checkpoint"
    __table_args__ = (Index("ix_checkpoint_job_seq", "job_id", "seq", unique=True),)

    id: str = Field(primary_key=True, max_length=32)
    job_id: str = Field(foreign_key="job.id", max_length=32)
    seq: int = Field(sa_type=BigInteger)
    attempt: int
    step: int | None = None
    epoch: int | None = None
    metrics: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON))
    size: int = Field(sa_type=BigInteger)
    sha256: str = Field(max_length=64)
    path: str = Field(max_length=1024)
    # "file", or "dir": a directory, kept and served as one canonical tar stream
    # (service/artifacts/tree.py) whose sha256 and size these are; `manifest` lists its files
    # (path, size, sha256).
    kind: str = Field(default="file", max_length=8)
    files: int = 1
    manifest: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON))
    created_at: datetime = Field(default_factory=utcnow)
    # Set when retention (or a newer save under the same path) retired it: the row stays, so
    # the job's event history keeps its `checkpoint` event; a `checkpoint_deleted` follows.
    deleted_at: datetime | None = None


class RankStack(SQLModel, table=True):
    """The Python stack of one rank at one moment (py-spy), recorded on a hang or on request."""

    __tablename__ = "rank_stack"
    __table_args__ = (Index("ix_rank_stack_job_ts", "job_id", "ts"),)

    id: int | None = Field(default=None, primary_key=True, sa_type=BigIntPK)
    job_id: str = Field(max_length=32)
    attempt: int
    rank: int
    node: int = 0
    ts: float
    reason: str = Field(max_length=16)
    stack: str = Field(sa_column=Column(Text, nullable=False))
    # Inside a torch.distributed collective (or waiting on one), as read from the stack.
    in_collective: bool = Field(default=False, sa_column=Column(Boolean, nullable=False))
    # When the rank last wrote to its log (Unix seconds), its progress as the worker saw it.
    last_output_ts: float | None = None


# Serves log search (`LIKE '%q%'` and `~`) on PostgreSQL where pg_trgm could be created
# (migration 0009); SQLite has no such index and scans.
Index(
    "ix_log_line_line_trgm",
    LogLine.__table__.c.line,  # type: ignore[attr-defined]
    postgresql_using="gin",
    postgresql_ops={"line": "gin_trgm_ops"},
).ddl_if(dialect="postgresql")


class MetricRollup(SQLModel, table=True):
    """The smallest and largest point of one metric in one bucket of `width` seqs
    (`bucket` = seq // width), at several widths: `GET …/metrics?max_points=` reads a job's
    chart from these in time independent of its number of points. Each extreme is kept whole
    (seq, step, epoch, value, ts, attempt: what the route returns of a point), so a chart
    reads no `metric_point` row. Kept by the writer of the points, in their transaction."""

    __tablename__ = "metric_rollup"

    # Key order (job, width, name, bucket): a chart reads one width's buckets in order, and
    # the names of a job's metrics are its few coarsest rows.
    job_id: str = Field(foreign_key="job.id", primary_key=True, max_length=32)
    width: int = Field(primary_key=True)
    name: str = Field(primary_key=True, max_length=128)
    bucket: int = Field(primary_key=True, sa_type=BigInteger)
    min_value: float
    min_seq: int = Field(sa_type=BigInteger)
    max_value: float
    max_seq: int = Field(sa_type=BigInteger)
    min_step: int | None = None
    min_epoch: int | None = None
    min_ts: float
    min_attempt: int
    max_step: int | None = None
    max_epoch: int | None = None
    max_ts: float
    max_attempt: int
