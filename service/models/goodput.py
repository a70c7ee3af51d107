"""The goodput ledger's tables (docs/goodput.md): what the worker marked of each attempt while
it ran, and each ended job's ledger, written once when it ends."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel


class AttemptMark(SQLModel, table=True):
    """What one node's supervisor gathered of an attempt from the ranks' events file (one row,
    rewritten as it changes, however many marks the program writes): Unix seconds, clipped
    to the attempt's running span; the totals in seconds (`jobs.contract.goodput.AttemptMarks`)."""

    __tablename__ = "attempt_mark"

    job_id: str = Field(primary_key=True, max_length=32)
    attempt: int = Field(primary_key=True)
    node: int = Field(primary_key=True)
    first_step_at: float | None = None
    last_progress_at: float | None = None
    checkpoint_stall_s: float = 0.0
    checkpoint_saves: int = 0
    eval_s: float = 0.0
    evals: int = 0
    last_checkpoint_at: float | None = None
    ended_at: float | None = None
    hang_since: float | None = None


class JobGoodput(SQLModel, table=True):
    """An ended job's ledger: the seconds of each part as columns (the device-seconds of a part
    where devices are held are `devices` × its seconds), so `GET /v1/goodput` is one grouped
    query; the whole answer of `GET /v1/jobs/{id}/goodput` in `ledger`."""

    __tablename__ = "job_goodput"
    __table_args__ = (
        Index("ix_job_goodput_ended_at", "ended_at"),
        Index("ix_job_goodput_owner_ended_at", "owner", "ended_at"),
    )

    job_id: str = Field(primary_key=True, max_length=32)
    owner: str = Field(max_length=128)
    queue: str = Field(max_length=64)
    name: str = Field(max_length=128)
    state: str = Field(max_length=16)
    ended_at: datetime
    devices: int
    wall_s: float
    device_s: float
    # Device-seconds held outside `training`: what ranks the jobs that lost most.
    badput_device_s: float
    queued_s: float = 0.0
    environment_s: float = 0.0
    launch_s: float = 0.0
    first_step_s: float = 0.0
    training_s: float = 0.0
    checkpoint_stall_s: float = 0.0
    eval_s: float = 0.0
    hang_s: float = 0.0
    lost_work_s: float = 0.0
    retry_gap_s: float = 0.0
    teardown_s: float = 0.0
    ledger: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
