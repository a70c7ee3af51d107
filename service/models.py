"""Database tables.

Every row a job produces (state events, metric points, log lines, checkpoints) carries a
`seq` drawn from the job's own counter (`Job.last_seq`) in the same transaction as the
insert, so `seq` is one dense, monotonic order per job: the id of the live event stream.
"""

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import WithJsonSchema
from sqlalchemy import JSON, BigInteger, Column, Dialect, Index, Integer, Text, UniqueConstraint
from sqlalchemy.types import TypeDecorator
from sqlmodel import AutoString, Field, SQLModel

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets 64 bits.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class StrEnumColumn(TypeDecorator[StrEnum]):
    """A string column whose values are read back as members of `enum` (stored as plain
    strings, so the schema does not change)."""

    impl = AutoString
    cache_ok = True

    def __init__(self, enum: type[StrEnum], length: int) -> None:
        super().__init__(length=length)
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else str(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> StrEnum | None:
        return None if value is None else self.enum(value)


def inline_enum(enum: type[StrEnum]) -> WithJsonSchema:
    """A string enum's JSON schema written where it is used (`type` and `enum`), not as a
    reference: clients that read a field's type from the schema see a string."""
    return WithJsonSchema({"type": "string", "enum": [m.value for m in enum]})


class JobBase(SQLModel):
    """What a job's row (`Job`) and its public form (`service.schemas.JobPublic`) share, in
    the order clients see them."""

    id: str = Field(primary_key=True, max_length=32)
    name: str = Field(max_length=128)
    state: Annotated[JobState, inline_enum(JobState)] = Field(
        sa_type=StrEnumColumn(JobState, 16), index=True
    )
    # As accepted, defaults filled; read it typed with `Job.job_spec()`.
    spec: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, index=True)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 1
    exit_code: int | None = None
    exit_reason: Annotated[ExitReason, inline_enum(ExitReason)] | None = Field(
        default=None, sa_type=StrEnumColumn(ExitReason, 32)
    )
    message: str | None = Field(default=None, sa_type=Text)
    worker: str | None = Field(default=None, max_length=256)


class Job(JobBase, table=True):
    __tablename__ = "job"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_job_idempotency"),
        # `GET /v1/jobs` newest first under each filter, read from an index (0010).
        Index("ix_job_created_id", "created_at", "id"),
        Index("ix_job_state_created_id", "state", "created_at", "id"),
        Index("ix_job_owner_created_id", "owner", "created_at", "id"),
        Index("ix_job_owner_state_created_id", "owner", "state", "created_at", "id"),
        Index("ix_job_name_created_id", "name", "created_at", "id"),
    )

    owner: str = Field(default="", max_length=128, index=True)
    queue: str = Field(max_length=64)
    last_heartbeat: datetime | None = None
    progress_step: int | None = None
    progress_epoch: int | None = None
    total_steps: int | None = None
    latest_metrics: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON))
    last_seq: int = Field(default=0, sa_type=BigInteger)
    idempotency_key: str | None = Field(default=None, max_length=256)
    request_hash: str | None = Field(default=None, max_length=64)
    # Bytes of its run directories and checkpoints, measured when an attempt ends.
    disk_bytes: int | None = Field(default=None, sa_type=BigInteger)
    # Bytes of log lines stored, and lines counted but not stored past the per-job cap.
    log_bytes: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default="0")
    )
    log_lines_dropped: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default="0")
    )
    # When retention deleted its metric points, and its log lines.
    metrics_pruned_at: datetime | None = None
    logs_pruned_at: datetime | None = None

    def job_spec(self) -> JobSpec:
        """The spec, typed: the one way to read it (the column holds it as accepted, defaults
        filled)."""
        return JobSpec.model_validate(self.spec)


class JobEvent(SQLModel, table=True):
    """A change in a job's life: a state change, a restart of its ranks, a checkpoint retired."""

    __tablename__ = "job_event"
    __table_args__ = (Index("ix_job_event_job_seq", "job_id", "seq", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(foreign_key="job.id", max_length=32)
    seq: int = Field(sa_type=BigInteger)
    kind: str = Field(max_length=32)
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
    # Set when retention (or a newer save under the same path) retired it: the row stays, so
    # the job's event history keeps its `checkpoint` event; a `checkpoint_deleted` follows.
    deleted_at: datetime | None = None


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


class JobTag(SQLModel, table=True):
    """A job's tag (`spec.tags`), one row each, so `GET /v1/jobs?tag=k=v` reads an index
    newest first instead of every spec's JSON. `created_at` is the job's."""

    __tablename__ = "job_tag"
    __table_args__ = (
        Index("ix_job_tag_key_value_created", "key", "value", "created_at", "job_id"),
    )

    job_id: str = Field(foreign_key="job.id", primary_key=True, max_length=32)
    key: str = Field(primary_key=True, max_length=128)
    value: str = Field(max_length=1024)
    created_at: datetime


class MetricRollup(SQLModel, table=True):
    """The smallest and largest point of one metric in one bucket of `width` seqs
    (`bucket` = seq // width), at several widths: `GET …/metrics?max_points=` reads a job's
    chart from these in time independent of its number of points. Kept by the writer of the
    points, in their transaction."""

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
