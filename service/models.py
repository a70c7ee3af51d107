"""Database tables.

Every row a job produces (state events, metric points, log lines, checkpoints) carries a
`seq` drawn from the job's own counter (`Job.last_seq`) in the same transaction as the
insert, so `seq` is one dense, monotonic order per job: the id of the live event stream.
"""

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import WithJsonSchema
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Dialect,
    Index,
    Integer,
    Text,
    UniqueConstraint,
)
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
    # While queued under the dispatcher (docs/scheduling.md): its place in the order the
    # queue will run (1 first) and why it is not running yet.
    queue_position: int | None = None
    pending_reason: str | None = Field(default=None, max_length=512)


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
    # Set by `POST /v1/jobs/{id}/stacks`; the attempt's supervisor, which reads the row every
    # 0.5 s, records every rank's stack when it sees a value it has not served.
    stacks_requested_at: datetime | None = None
    # Attempts stopped for a job of higher priority: they use none of `max_retries`.
    preemptions: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default="0")
    )
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


class Webhook(SQLModel, table=True):
    """An endpoint that is told of jobs' events: its owner's jobs, or every job (`all_jobs`,
    an admin's). The secret signs each delivery, so it is kept as given (shown once)."""

    __tablename__ = "webhook"

    id: str = Field(primary_key=True, max_length=32)
    owner: str = Field(max_length=128, index=True)
    url: str = Field(sa_column=Column(Text, nullable=False))
    events: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # `json` (the documented body) or `slack` (`{"text": ...}`, for Slack's incoming webhooks).
    format: str = Field(default="json", max_length=16)
    all_jobs: bool = Field(default=False, sa_column=Column(Boolean, nullable=False))
    secret: str = Field(max_length=128, repr=False)
    created_at: datetime = Field(default_factory=utcnow)


class WebhookDelivery(SQLModel, table=True):
    """One event for one endpoint: the outbox row the API's delivery loop sends, retries and
    records. Deliveries of a job to an endpoint go in `position` order: the job's event seq
    times two, plus one for the second delivery of one event (`terminal` after `state`, `best`
    after `checkpoint`)."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (
        Index("ix_webhook_delivery_due", "status", "next_attempt_at"),
        Index("ix_webhook_delivery_hook_job_position", "webhook_id", "job_id", "position"),
    )

    id: str = Field(primary_key=True, max_length=32)
    webhook_id: str = Field(max_length=32)
    job_id: str = Field(max_length=32)
    position: int = Field(sa_type=BigInteger)
    type: str = Field(max_length=16)
    body: str = Field(sa_column=Column(Text, nullable=False))
    # pending (to send, or to retry), delivered, failed (gave up).
    status: str = Field(default="pending", max_length=16)
    attempts: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    next_attempt_at: datetime = Field(default_factory=utcnow)
    # Set at the first attempt (and again on a redelivery): retries stop after it.
    give_up_at: datetime | None = None
    claimed_until: datetime | None = None
    last_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = Field(default=None, sa_column=Column(Text))
    delivered_at: datetime | None = None


class AuditRecord(SQLModel, table=True):
    """One state-changing request, answered or refused: who, when, from where, what, outcome."""

    __tablename__ = "audit_record"

    id: int | None = Field(default=None, primary_key=True, sa_type=BigIntPK)
    ts: datetime = Field(default_factory=utcnow, index=True)
    # The caller's name; None when it was not authenticated.
    owner: str | None = Field(default=None, max_length=128, index=True)
    kind: str = Field(max_length=64, index=True)
    method: str = Field(max_length=8)
    path: str = Field(sa_column=Column(Text, nullable=False))
    target: str | None = Field(default=None, max_length=256)
    client: str | None = Field(default=None, max_length=64)
    status: int
    outcome: str = Field(max_length=16)


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


class DispatcherLease(SQLModel, table=True):
    """The one row that says which API process dispatches (docs/scheduling.md). `token`, the
    fencing token, grows by one at each takeover; every admission checks it in its own
    transaction, so a dispatcher that lost the lease admits nothing."""

    __tablename__ = "dispatcher_lease"

    id: int = Field(primary_key=True)
    holder: str = Field(max_length=256)
    token: int = Field(sa_type=BigInteger)
    expires_at: datetime


class JobReservation(SQLModel, table=True):
    """Devices of one worker given to one node of an attempt by the dispatcher. Active while
    `released_at` is null; kept afterwards as the owner's usage (device-seconds)."""

    __tablename__ = "job_reservation"
    __table_args__ = (
        Index("ix_job_reservation_released_at", "released_at"),
        Index("ix_job_reservation_owner_admitted_at", "owner", "admitted_at"),
    )

    job_id: str = Field(primary_key=True, max_length=32)
    attempt: int = Field(primary_key=True)
    node: int = Field(primary_key=True)
    owner: str = Field(max_length=128)
    worker: str = Field(max_length=256)
    devices: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # The fencing token of the dispatcher that admitted it.
    token: int = Field(sa_type=BigInteger)
    admitted_at: datetime
    released_at: datetime | None = None


class OwnerPolicy(SQLModel, table=True):
    """An owner's share and limits under the dispatcher; owner `*` is everyone's default.
    Changed by an admin through /v1/policies, read by every dispatch pass."""

    __tablename__ = "owner_policy"

    owner: str = Field(primary_key=True, max_length=128)
    weight: float = 1.0
    max_devices: int | None = None
    max_device_hours: float | None = None
    max_priority: int | None = None


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
