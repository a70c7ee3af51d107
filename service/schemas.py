"""Response bodies. Requests are `jobs.spec.JobSpec` (jobs) or small models beside routes."""

import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from jobs.contract.checkpoints import CheckpointPolicy
from service.models import Checkpoint, Job, JobBase, JobNode, LogLine, MetricPoint

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
    # Seconds left at the recent step rate while running (`eta_left`), else null.
    eta_s: float | None


def eta_left(job: Job, now: float | None = None) -> float | None:
    """A running job's seconds left: the worker's estimate, counted down since it was made."""
    if job.state != "running" or job.eta_s is None or job.eta_at is None:
        return None
    since = max(0.0, (time.time() if now is None else now) - job.eta_at)
    return round(max(0.0, job.eta_s - since), 1)


class JobPublic(JobBase):
    """A job as clients see it: its row's shared fields (`JobBase`), the spec with secrets
    masked, and its progress."""

    # Every field is in every answer, defaults or not.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)  # type: ignore[assignment]

    progress: Progress
    latest_metrics: dict[str, float]

    @model_validator(mode="before")
    @classmethod
    def _from_row(cls, data: Any) -> Any:
        """Read from a `Job` row: what differs from the row, the rest as it is."""
        if not isinstance(data, Job):
            return data
        queued = data.state == "queued"
        return {
            **{name: getattr(data, name) for name in JobBase.model_fields},
            # Shown while queued only: what the dispatcher last wrote.
            "queue_position": data.queue_position if queued else None,
            "pending_reason": data.pending_reason if queued else None,
            "spec": masked_spec(data.spec),
            "progress": Progress(
                step=data.progress_step,
                epoch=data.progress_epoch,
                total_steps=data.total_steps,
                eta_s=eta_left(data),
            ),
            "latest_metrics": data.latest_metrics or {},
        }


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
    # True when `total` stopped counting at the exact-count limit: at least that many match.
    total_is_estimate: bool = False


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
    # With `order=desc`: the `before` of the next (older) page; absent when there is none.
    next_before: int | None = None
    # Lines the job wrote past its log cap (`LAUNCHBAY_MAX_LOG_BYTES_PER_JOB`), counted but not
    # stored; absent when none.
    lines_dropped: int | None = None


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
    attempt: int = Field(
        description="The attempt that reported the point. Points of different attempts may "
        "share a step (a retry that resumes from a checkpoint reports its steps again): this "
        "tells them apart. Within an attempt, an elastic restart's `restart` event (its seq, "
        "GET …/timeline) divides the points of the runs before and after it."
    )

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
    # "file", or "dir": a directory, downloaded as one tar stream (`size` and `sha256` are the
    # stream's; `files` and `manifest` (path, size, sha256 of each file) say what it holds).
    kind: str = "file"
    files: int = 1
    manifest: list[dict[str, Any]] | None = None
    # Whether `…/checkpoints/best/download` (`latest`) names it: set in a listing and a webhook's
    # delivery; a stream's `checkpoint` event records the registration and leaves them false.
    best: bool = False
    latest: bool = False

    @classmethod
    def from_row(
        cls, row: Checkpoint, best: bool = False, latest: bool = False
    ) -> "CheckpointPublic":
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
            kind=row.kind,
            files=row.files,
            manifest=row.manifest,
            best=best,
            latest=latest,
        )


class CheckpointsPublic(BaseModel):
    items: list[CheckpointPublic]

    @classmethod
    def marked(cls, policy: CheckpointPolicy, rows: Sequence[Checkpoint]) -> "CheckpointsPublic":
        """A job's live checkpoints with `best` on the one `CheckpointPolicy.named_best` picks
        (what `…/checkpoints/best/download` serves) and `latest` on the highest seq."""
        best = policy.named_best(rows, metrics=lambda c: c.metrics, seq=lambda c: c.seq)
        latest = max(rows, key=lambda c: c.seq, default=None)
        return cls(items=[CheckpointPublic.from_row(r, r is best, r is latest) for r in rows])


class WorkerJob(BaseModel):
    id: str
    attempt: int
    # The node of a multi-node job this worker runs.
    node: int | None = None


class WorkerPublic(BaseModel):
    """A worker as GET /v1/workers answers: its record (`WorkerRecord`) but for what stays
    between the workers of a host."""

    name: str
    host: str
    pid: int
    queues: list[str]
    # The worker's devices (worker/devices.py): its CUDA ids, else its CPU slots, as
    # "cpu:0" ... "cpu:<N-1>". A job may have as many ranks per node as there are.
    devices: list[str]
    state: Literal["idle", "busy"]
    started_at: datetime
    last_heartbeat: datetime
    current_job: WorkerJob | None
    # Under the dispatcher: what is reserved on it, by which job (docs/scheduling.md).
    reservations: list["WorkerReservation"] = []


class WorkerReservation(BaseModel):
    job_id: str
    attempt: int
    node: int
    devices: list[str]


class WorkerRecord(WorkerPublic):
    """What each `launchbay worker` keeps about itself in Redis (`worker.rq_worker`, refreshed with
    every heartbeat, `service.worker_records.save_worker_record`): the workers of a host read it to
    refuse each other's GPUs, the API answers its public part."""

    # The UUIDs of its GPUs, in the order of `devices` (worker/devices.py).
    gpu_uuids: list[str] = []
    # Its own RQ queue, on which the dispatcher hands it jobs (docs/scheduling.md).
    dispatch_queue: str | None = None
    # The pool of devices it shares with the other workers of its host in that pool.
    pool: str | None = None


class WorkersPublic(BaseModel):
    # Records answered as WorkerPublic: fields of the record beyond it are not serialized.
    items: list[WorkerPublic]


class RecipePublic(BaseModel):
    name: str
    description: str
    config_schema: dict[str, Any]


class RecipesPublic(BaseModel):
    items: list[RecipePublic]


class MetricSummary(BaseModel):
    """One metric of a run: its last value and its smallest, largest and best over all the
    job's attempts. `best_mode` says which of the two is best: the job's
    `checkpoint.best_mode` for its `best_metric`; otherwise `min` for a name with `loss` or
    `error` in it, else `max`."""

    last: float | None
    min: float | None
    max: float | None
    best: float | None
    best_mode: Literal["min", "max"]


class RunPublic(BaseModel):
    job: JobPublic
    metrics: dict[str, MetricSummary]


class RunsPublic(BaseModel):
    items: list[RunPublic]
    total: int
    total_is_estimate: bool = False
