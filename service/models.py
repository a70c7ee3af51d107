"""Database tables.

Every row a job produces (state events, metric points, log lines, checkpoints) carries a
`seq` drawn from the job's own counter (`Job.last_seq`) in the same transaction as the
insert, so `seq` is one dense, monotonic order per job: the id of the live event stream.
"""

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets 64 bits.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class Job(SQLModel, table=True):
    __tablename__ = "job"
    __table_args__ = (UniqueConstraint("owner", "idempotency_key", name="uq_job_idempotency"),)

    id: str = Field(primary_key=True, max_length=32)
    name: str = Field(max_length=128)
    owner: str = Field(default="", max_length=128, index=True)
    state: str = Field(max_length=16, index=True)
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    queue: str = Field(max_length=64)
    attempt: int = 1
    created_at: datetime = Field(default_factory=utcnow, index=True)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_heartbeat: datetime | None = None
    exit_code: int | None = None
    exit_reason: str | None = Field(default=None, max_length=32)
    message: str | None = Field(default=None, sa_column=Column(Text))
    worker: str | None = Field(default=None, max_length=256)
    progress_step: int | None = None
    progress_epoch: int | None = None
    total_steps: int | None = None
    latest_metrics: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON))
    last_seq: int = Field(default=0, sa_type=BigInteger)
    idempotency_key: str | None = Field(default=None, max_length=256)
    request_hash: str | None = Field(default=None, max_length=64)
    # Bytes of its run directories and checkpoints, measured when an attempt ends.
    disk_bytes: int | None = Field(default=None, sa_type=BigInteger)


class JobEvent(SQLModel, table=True):
    """A change in a job's life: a state change, or a restart of its ranks."""

    __tablename__ = "job_event"
    __table_args__ = (Index("ix_job_event_job_seq", "job_id", "seq", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(foreign_key="job.id", max_length=32)
    seq: int = Field(sa_type=BigInteger)
    kind: str = Field(max_length=16)
    attempt: int
    ts: float
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON))


class MetricPoint(SQLModel, table=True):
    __tablename__ = "metric_point"
    __table_args__ = (
        Index("ix_metric_point_job_seq", "job_id", "seq", unique=True),
        Index("ix_metric_point_job_name_seq", "job_id", "name", "seq"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BigIntPK)
    job_id: str = Field(foreign_key="job.id", max_length=32)
    seq: int = Field(sa_type=BigInteger)
    attempt: int
    step: int | None = None
    epoch: int | None = None
    name: str = Field(max_length=128)
    value: float
    ts: float


class LogLine(SQLModel, table=True):
    __tablename__ = "log_line"
    __table_args__ = (
        Index("ix_log_line_job_seq", "job_id", "seq", unique=True),
        Index("ix_log_line_job_rank_seq", "job_id", "rank", "seq"),
    )

    id: int | None = Field(default=None, primary_key=True, sa_type=BigIntPK)
    job_id: str = Field(foreign_key="job.id", max_length=32)
    seq: int = Field(sa_type=BigInteger)
    attempt: int
    rank: int
    # Which node of a multi-node job wrote it (0 for a single-node job); `rank` is global.
    node: int = Field(default=0, sa_column=Column(Integer, nullable=False, server_default="0"))
    ts: float
    line: str = Field(sa_column=Column(Text, nullable=False))


class JobNode(SQLModel, table=True):
    """One node of an attempt of a multi-node job (`nnodes` > 1): the worker that took the
    node's task, and how that node ended.

    The node that joins first hosts torch's c10d rendezvous: its row holds the `endpoint`
    every other node of the attempt is started with. `failed_at` is set when the node
    announces a failure before it stops its processes, so the job ends with the cause (a lost
    worker, a timeout) rather than with what its peers' ranks saw next (a broken collective).
    """

    __tablename__ = "job_node"

    job_id: str = Field(foreign_key="job.id", primary_key=True, max_length=32)
    attempt: int = Field(primary_key=True)
    node: int = Field(primary_key=True)
    worker: str = Field(max_length=256)
    host: str = Field(max_length=256)
    endpoint: str | None = Field(default=None, max_length=300)
    state: str = Field(max_length=16)
    joined_at: datetime = Field(default_factory=utcnow)
    last_heartbeat: datetime = Field(default_factory=utcnow)
    failed_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    exit_reason: str | None = Field(default=None, max_length=32)
    message: str | None = Field(default=None, sa_column=Column(Text))


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
    created_at: datetime = Field(default_factory=utcnow)


class CodeUpload(SQLModel, table=True):
    """Who uploaded which code. The files live once per `code_id` (the sha256 of the upload)
    under `<data dir>/code/<code_id>/`; each owner who uploaded them has a row."""

    __tablename__ = "code_upload"

    code_id: str = Field(primary_key=True, max_length=64)
    owner: str = Field(primary_key=True, max_length=128)
    filename: str = Field(max_length=255)
    size: int = Field(sa_type=BigInteger)
    created_at: datetime = Field(default_factory=utcnow)
    # What it unpacked to, counted against the owner's quota (0 for uploads before 0006).
    unpacked_size: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default="0")
    )


class ApiToken(SQLModel, table=True):
    """A bearer token. `name` is its owner's name: the jobs and uploads the token makes carry it.

    Only the sha256 of the secret is kept. A revoked token keeps its row (`revoked_at`), so its
    name, and with it the jobs of that name, never passes silently to a new token.
    """

    __tablename__ = "api_token"

    name: str = Field(primary_key=True, max_length=128)
    role: str = Field(max_length=16)
    token_hash: str = Field(max_length=64, unique=True, index=True)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
