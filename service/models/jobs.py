"""A job's tables: its row (and the base its public form shares), its event history, the
nodes of a multi-node attempt, its tags."""

from datetime import datetime
from typing import Annotated, Any

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, Text, UniqueConstraint
from sqlmodel import Field, SQLModel

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service.models.columns import StrEnumColumn, inline_enum, utcnow


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
    # What went wrong without failing the job (`service.records.job_warnings`): ranks that never
    # formed one process group, nothing recorded at all, a `best_metric` never reported.
    warnings: list[str] = Field(
        default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]")
    )
    # How its latest attempt's ranks were started (`worker.launch_path`): `warm`, forked from the
    # worker's fork server, or `cold`, under torchrun; null until an attempt starts them.
    launch_path: str | None = Field(default=None, max_length=8)


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
    # Whether the submitted spec named its `launcher` (named: that launcher, cold; else the
    # worker may start the ranks warm, docs/training-scripts.md).
    launcher_given: bool = Field(default=False, sa_column_kwargs={"server_default": "0"})
    queue: str = Field(max_length=64)
    last_heartbeat: datetime | None = None
    progress_step: int | None = None
    progress_epoch: int | None = None
    total_steps: int | None = None
    # The seconds left at the recent step rate, as the worker estimated them at `eta_at` (Unix
    # seconds; `worker.step_rate`); the Job's `progress.eta_s` counts down from there.
    eta_s: float | None = None
    eta_at: float | None = None
    latest_metrics: dict[str, float] = Field(default_factory=dict, sa_column=Column(JSON))
    last_seq: int = Field(default=0, sa_type=BigInteger)
    idempotency_key: str | None = Field(default=None, max_length=256)
    request_hash: str | None = Field(default=None, max_length=64)
    # Bytes of its run directories and checkpoints, measured when an attempt ends.
    disk_bytes: int | None = Field(default=None, sa_type=BigInteger)
    # Set by `POST /v1/jobs/{id}/stacks`; the attempt's supervisor, which reads the row every
    # 0.5 s, records every rank's stack when it sees a value it has not served.
    stacks_requested_at: datetime | None = None
    # Set every few seconds by an API process while one of its event streams watches the job
    # (`service.stream_notifier`): the supervisor then stores what the ranks write every poll,
    # for the stream's latency, instead of once a second (`worker.ingest`).
    watched_at: datetime | None = None
    # Attempts stopped for a job of higher priority: they use none of `max_retries`.
    preemptions: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default="0")
    )
    # Attempts admitted onto a worker that went away before it took them (the dispatcher
    # queued the job again as its next attempt): they use none of `max_retries` either.
    lost_admissions: int = Field(
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
