"""The Launchbay client: the Python SDK (`Client`, `AsyncClient`, the typed records of
`client.models`) and the `launchbay` command line (`client.cli`)."""

from client.aio import AsyncClient
from client.errors import (
    ApiError,
    ChecksumMismatch,
    CommandError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    LaunchbayClientError,
    NotFound,
    PackError,
    ServiceUnavailable,
    Unauthorized,
    WaitTimeout,
)
from client.models import (
    Checkpoint,
    Event,
    ExitReason,
    Job,
    JobPage,
    JobState,
    LogLine,
    MetricPoint,
)
from client.sdk import Client

__all__ = [
    "ApiError",
    "AsyncClient",
    "Checkpoint",
    "ChecksumMismatch",
    "Client",
    "CommandError",
    "Conflict",
    "ConnectionFailed",
    "Event",
    "ExitReason",
    "Forbidden",
    "InvalidRequest",
    "Job",
    "JobPage",
    "JobState",
    "LaunchbayClientError",
    "LogLine",
    "MetricPoint",
    "NotFound",
    "PackError",
    "ServiceUnavailable",
    "Unauthorized",
    "WaitTimeout",
]
