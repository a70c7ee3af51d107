"""Response bodies. Requests are `jobs.spec.JobSpec` (jobs) or small models beside routes."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from service.models import Checkpoint, Job, JobNode, LogLine, MetricPoint

SECRET_MASK = "***"


class ErrorDetail(BaseModel):
    code: str
    message: str
    detail: Any


class ErrorBody(BaseModel):
    """Every error answer: `{"error": {"code", "message", "detail"}}` (see service.errors)."""

    error: ErrorDetail


# Documented on every route, so the OpenAPI schema says what clients get for any error.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorBody, "description": "The request was refused (the error body)."},
    "5XX": {"model": ErrorBody, "description": "The service failed (the error body)."},
}


class Progress(BaseModel):
    step: int | None
    epoch: int | None
    total_steps: int | None


class JobPublic(BaseModel):
    id: str
    name: str
    state: str
    spec: dict[str, Any]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int
    exit_code: int | None
    exit_reason: str | None
    message: str | None
    worker: str | None
    progress: Progress
    latest_metrics: dict[str, float]

    @classmethod
    def from_row(cls, job: Job) -> "JobPublic":
        return cls(
            id=job.id,
            name=job.name,
            state=job.state,
            spec=masked_spec(job.spec),
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            attempt=job.attempt,
            exit_code=job.exit_code,
            exit_reason=job.exit_reason,
            message=job.message,
            worker=job.worker,
            progress=Progress(
                step=job.progress_step, epoch=job.progress_epoch, total_steps=job.total_steps
            ),
            latest_metrics=job.latest_metrics or {},
        )


def masked_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as shown to clients: the values of `secret_env` variables are masked."""
    secret = spec.get("secret_env") or []
    env = spec.get("env") or {}
    if not secret:
        return spec
    return {**spec, "env": {k: SECRET_MASK if k in secret else v for k, v in env.items()}}


class JobsPublic(BaseModel):
    items: list[JobPublic]
    total: int


class LogLinePublic(BaseModel):
    seq: int
    rank: int
    # The node of a multi-node job the rank ran on (0 otherwise); `rank` is the global rank.
    node: int
    ts: float
    line: str

    @classmethod
    def from_row(cls, row: LogLine) -> "LogLinePublic":
        return cls(seq=row.seq, rank=row.rank, node=row.node, ts=row.ts, line=row.line)


class LogsPublic(BaseModel):
    items: list[LogLinePublic]
    next_after: int


class NodePublic(BaseModel):
    """A node of an attempt of a multi-node job."""

    attempt: int
    node: int
    worker: str
    host: str
    # Set on the node that hosts the attempt's rendezvous (`host:port`).
    endpoint: str | None
    state: str
    joined_at: datetime
    last_heartbeat: datetime
    finished_at: datetime | None
    exit_code: int | None
    exit_reason: str | None
    message: str | None

    @classmethod
    def from_row(cls, row: JobNode) -> "NodePublic":
        return cls.model_validate(row, from_attributes=True)


class NodesPublic(BaseModel):
    items: list[NodePublic]


class MetricPointPublic(BaseModel):
    seq: int
    step: int | None
    epoch: int | None
    name: str
    value: float
    ts: float
    attempt: int

    @classmethod
    def from_row(cls, row: MetricPoint) -> "MetricPointPublic":
        return cls(
            seq=row.seq,
            step=row.step,
            epoch=row.epoch,
            name=row.name,
            value=row.value,
            ts=row.ts,
            attempt=row.attempt,
        )


class MetricsPublic(BaseModel):
    items: list[MetricPointPublic]
    next_after: int


class CheckpointPublic(BaseModel):
    id: str
    job_id: str
    attempt: int
    step: int | None
    epoch: int | None
    metrics: dict[str, float]
    size: int
    sha256: str
    path: str
    created_at: datetime

    @classmethod
    def from_row(cls, row: Checkpoint) -> "CheckpointPublic":
        return cls(
            id=row.id,
            job_id=row.job_id,
            attempt=row.attempt,
            step=row.step,
            epoch=row.epoch,
            metrics=row.metrics or {},
            size=row.size,
            sha256=row.sha256,
            path=row.path,
            created_at=row.created_at,
        )


class CheckpointsPublic(BaseModel):
    items: list[CheckpointPublic]


class RecipePublic(BaseModel):
    name: str
    description: str
    config_schema: dict[str, Any]


class RecipesPublic(BaseModel):
    items: list[RecipePublic]
