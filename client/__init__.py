"""The Launchbay client: the Python SDK (`Client`) and the `launchbay` command line."""

from client.errors import (
    ApiError,
    ChecksumMismatch,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    LaunchbayClientError,
    NotFound,
    ServiceUnavailable,
    Unauthorized,
    WaitTimeout,
)
from client.sdk import Client
from client.sse import Event

__all__ = [
    "ApiError",
    "ChecksumMismatch",
    "Client",
    "Conflict",
    "ConnectionFailed",
    "Event",
    "Forbidden",
    "InvalidRequest",
    "LaunchbayClientError",
    "NotFound",
    "ServiceUnavailable",
    "Unauthorized",
    "WaitTimeout",
]
