"""The SDK's records of the service's operations: webhooks, ranks' stacks, log search, audit,
queue, usage and code uploads (re-exported by `client.models`, where the job's records are)."""

from datetime import datetime
from typing import Any

from client.models import ApiModel, LogLine


class Webhook(ApiModel):
    """An endpoint told of jobs' events (`events`: state, terminal, checkpoint, best)."""

    id: str
    url: str
    events: list[str]
    format: str
    all_jobs: bool
    owner: str
    created_at: datetime


class CreatedWebhook(Webhook):
    """A webhook just registered, with the secret that signs its deliveries (shown once)."""

    secret: str


class WebhookDelivery(ApiModel):
    """One event sent (or to send) to one endpoint: status `pending`, `delivered` or `failed`."""

    id: str
    webhook_id: str
    job_id: str
    type: str
    status: str
    attempts: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: datetime | None


class RankStack(ApiModel):
    """A rank's Python stack at `ts` (`reason`: `hang` or `request`)."""

    rank: int
    node: int
    ts: float
    reason: str
    stack: str
    attempt: int
    in_collective: bool
    last_output_ts: float | None


class StackSummary(ApiModel):
    """The latest capture read as a whole: who waits in a collective, who is elsewhere, who is
    behind."""

    ts: float
    reason: str
    attempt: int
    in_collective: list[int]
    elsewhere: list[int]
    behind: list[int]
    note: str


class Stacks(ApiModel):
    items: list[RankStack]
    summary: StackSummary | None


class FoundLogLine(LogLine):
    """A log line found by a search across jobs."""

    job_id: str


class AuditRecord(ApiModel):
    """One state-changing request: who (`owner`), when, from where (`client`), what, outcome."""

    id: int
    ts: datetime
    owner: str | None
    kind: str
    method: str
    path: str
    target: str | None
    client: str | None
    status: int
    outcome: str


class QueueEntry(ApiModel):
    """A waiting job, as `GET /v1/queue` lists it (another owner's without id, name, owner)."""

    position: int | None = None
    job_id: str | None = None
    name: str | None = None
    owner: str | None = None
    queue: str
    priority: int
    nnodes: int
    nproc_per_node: int
    created_at: datetime
    pending_reason: str | None = None


class Queue(ApiModel):
    """`GET /v1/queue`: what waits, in the order it will run, and which API process dispatches."""

    items: list[QueueEntry]
    total: int
    dispatcher: dict[str, Any] | None = None


class OwnerUsage(ApiModel):
    owner: str
    device_seconds: float
    jobs: int


class Usage(ApiModel):
    """`GET /v1/usage`: device-seconds per owner between `since` and `until`."""

    since: datetime
    until: datetime
    items: list[OwnerUsage]


class CodeUpload(ApiModel):
    """One of your code uploads, as `GET /v1/code` lists it; `in_use` while a job of yours
    that has not finished runs it."""

    code_id: str
    sha256: str
    size: int
    filename: str
    unpacked_size: int
    created_at: datetime
    in_use: bool
