"""What the SDK returns: typed records of the API's answers (pydantic models).

Each model mirrors one response schema of the API: a test checks them against the live
service's OpenAPI document and its real answers
(`tests/integration/client/test_client_models_live.py`), so they cannot drift. Fields the
API adds later are kept (`extra="allow"`), so an older client still shows them in
`model_dump()`.

    job = lb.get_job(job_id)
    job.state is JobState.SUCCEEDED     # enums from jobs.states
    job.model_dump(mode="json")         # the plain dict, as the API sent it
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobs.states import TERMINAL_STATES, ExitReason, JobState

__all__ = [
    "ApiModel",
    "Artifact",
    "ArtifactPage",
    "AuditRecord",
    "Checkpoint",
    "CodeUpload",
    "CreatedToken",
    "CreatedWebhook",
    "Event",
    "ExitReason",
    "FoundLogLine",
    "Job",
    "JobPage",
    "JobState",
    "Limits",
    "LogLine",
    "LogPage",
    "MetricPage",
    "MetricPoint",
    "Node",
    "OwnerUsage",
    "Progress",
    "Queue",
    "QueueEntry",
    "RankStack",
    "Recipe",
    "StackSummary",
    "Stacks",
    "Token",
    "UploadedCode",
    "UploadedDirectory",
    "Usage",
    "Webhook",
    "WebhookDelivery",
    "Worker",
]


# An exit reason this client does not know yet (a newer server) stays a plain string.
Reason = Annotated[ExitReason | str, Field(union_mode="left_to_right")]


class ApiModel(BaseModel):
    """The base of every record: unknown fields are kept, values are not coerced on the way out."""

    model_config = ConfigDict(extra="allow", frozen=False)


class Progress(ApiModel):
    step: int | None = None
    epoch: int | None = None
    total_steps: int | None = None
    # Seconds left at the recent step rate while the job runs, else None.
    eta_s: float | None = None


class Job(ApiModel):
    """A job as `GET /v1/jobs/{id}` answers it; `spec` is the accepted spec, defaults filled."""

    id: str
    name: str
    state: JobState
    spec: dict[str, Any]
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int
    exit_code: int | None = None
    exit_reason: Reason | None = None
    message: str | None = None
    worker: str | None = None
    progress: Progress
    latest_metrics: dict[str, float]
    # While queued under the dispatcher: its place in the queue (1 first) and why it waits.
    queue_position: int | None = None
    pending_reason: str | None = None
    # What went wrong without failing the job (ranks that never formed one process group...).
    warnings: list[str] = []
    # How its latest attempt's ranks started: `warm` (forked from the worker's fork server) or
    # `cold` (torchrun); None until they do.
    launch_path: Literal["warm", "cold"] | None = None

    def is_terminal(self) -> bool:
        """True once the job is `succeeded`, `failed` or `cancelled`."""
        return self.state in TERMINAL_STATES


class JobPage(ApiModel):
    """One page of `GET /v1/jobs`: the jobs, newest first, and how many match in all."""

    items: list[Job]
    total: int
    # True when `total` stopped at the server's exact-count limit: at least that many match.
    total_is_estimate: bool = False


class MetricSummary(ApiModel):
    """One metric of a run (`GET /v1/runs`): its last value and its smallest, largest and best
    (`best_mode` says which extreme is best)."""

    last: float | None
    min: float | None
    max: float | None
    best: float | None
    best_mode: str


class Run(ApiModel):
    job: Job
    metrics: dict[str, MetricSummary]


class RunPage(ApiModel):
    """One page of `GET /v1/runs`: the jobs `GET /v1/jobs` lists, each with its metrics."""

    items: list[Run]
    total: int
    total_is_estimate: bool = False


class MetricPoint(ApiModel):
    seq: int
    step: int | None = None
    epoch: int | None = None
    name: str
    value: float
    ts: float
    attempt: int


class MetricPage(ApiModel):
    items: list[MetricPoint]
    next_after: int


class LogLine(ApiModel):
    """One line a rank wrote; `rank` is global, `node` the node of a multi-node job (else 0)."""

    seq: int
    rank: int
    node: int
    ts: float
    line: str


class LogPage(ApiModel):
    items: list[LogLine]
    next_after: int
    # With order="desc": the `before` of the next, older page (None: no older lines).
    next_before: int | None = None
    # Lines the job wrote past its log cap: counted, not stored.
    lines_dropped: int | None = None


class Checkpoint(ApiModel):
    """A registered checkpoint. In `list_checkpoints`, `best` marks the one
    `download_checkpoint(job_id, "best")` fetches (by the spec's `best_metric`, the latest on a
    tie; without a `best_metric`, the latest checkpoint; none when no checkpoint reports it) and
    `latest` the newest; the service decides both. A stream's `checkpoint` event leaves them
    False."""

    id: str
    job_id: str
    attempt: int
    step: int | None = None
    epoch: int | None = None
    metrics: dict[str, float]
    size: int
    sha256: str
    path: str
    created_at: datetime
    # "file", or "dir": a directory, downloaded as one tar (`size`, `sha256`: the tar's),
    # with `files` files listed in `manifest` (`path`, `size`, `sha256` each).
    kind: str = "file"
    files: int = 1
    manifest: list[dict[str, Any]] | None = None
    best: bool = False
    latest: bool = False


class Node(ApiModel):
    """A node of one attempt of a multi-node job."""

    attempt: int
    node: int
    worker: str
    host: str
    endpoint: str | None = None
    state: str
    joined_at: datetime
    last_heartbeat: datetime
    finished_at: datetime | None = None
    exit_code: int | None = None
    exit_reason: Reason | None = None
    message: str | None = None


class Recipe(ApiModel):
    name: str
    description: str
    config_schema: dict[str, Any]


class Worker(ApiModel):
    name: str
    host: str
    pid: int
    queues: list[str]
    devices: list[str]
    state: str
    started_at: datetime
    last_heartbeat: datetime
    current_job: dict[str, Any] | None = None


class Token(ApiModel):
    """A token as listed (never its secret)."""

    name: str
    role: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    active: bool


class CreatedToken(ApiModel):
    """A token just made: `token` is the secret, shown this once."""

    name: str
    role: str
    token: str


class UploadedCode(ApiModel):
    code_id: str
    sha256: str
    size: int


class Limits(ApiModel):
    """What the API takes of an upload (`GET /v1/limits`): its bytes, and the files and
    bytes an archive may unpack to."""

    max_upload_bytes: int
    max_code_files: int
    max_code_unpacked_bytes: int


class UploadedDirectory(ApiModel):
    """A directory packed and sent (or found already sent) by `upload_directory`: its
    `code_id`, the archive's size, the files in it, whether this call uploaded it, and what
    was left out that a person may not expect (`[path, why]`: links, odd names)."""

    code_id: str
    size: int
    files: list[str]
    unpacked_bytes: int
    uploaded: bool
    skipped: list[tuple[str, str]] = []


class Artifact(ApiModel):
    """A file a job kept (`path` relative to its artifacts, with '/')."""

    path: str
    size: int
    modified_at: datetime


class ArtifactPage(ApiModel):
    """`GET /v1/jobs/{id}/artifacts`; `truncated` when the job kept more than it lists."""

    items: list[Artifact]
    truncated: bool = False


class Event(ApiModel):
    """One event of a job's stream (`state`, `metric`, `log`, `checkpoint`, `restart`).

    `data` is the decoded JSON (the raw text if it is not JSON); `id` is the job's event
    sequence number, the one a reconnect resumes after.
    """

    id: str | None = None
    event: str
    data: Any = None

    @property
    def is_terminal(self) -> bool:
        """True for the `state` event that ends a job (`succeeded`, `failed`, `cancelled`)."""
        return (
            self.event == "state"
            and isinstance(self.data, dict)
            and self.data.get("state") in TERMINAL_STATES
        )


# The operations' records live beside (a module of their own), and are read from here too.
from client.ops_models import (  # noqa: E402
    AuditRecord,
    CodeUpload,
    CreatedWebhook,
    FoundLogLine,
    OwnerUsage,
    Queue,
    QueueEntry,
    RankStack,
    Stacks,
    StackSummary,
    Usage,
    Webhook,
    WebhookDelivery,
)
