"""What `Client` and `AsyncClient` share: settings, paths, paging and the download's rules.

Everything here is pure (no I/O but reading a partial download), so the two clients differ
only in how they wait for the network.
"""

import hashlib
import os
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from client.errors import ChecksumMismatch, WaitTimeout

DEFAULT_API_URL = "http://127.0.0.1:8000"
MAX_BACKOFF_S = 10.0
# How long an event stream keeps reconnecting through an API that does not answer (a restart,
# a deploy) before it gives up with ConnectionFailed.
STREAM_RECONNECT_S = 60.0
CHUNK_BYTES = 1024 * 1024
IDEMPOTENT_METHODS = ("GET", "HEAD", "DELETE")

JSON = dict[str, Any]
ProgressCallback = Callable[[int, int | None], None]
"""Called as `(bytes_done, bytes_total)` while a download runs; the total may be unknown."""

M = TypeVar("M", bound=BaseModel)


def resolve_api_url(api_url: str | None) -> str:
    return (api_url or os.environ.get("LAUNCHBAY_API_URL") or DEFAULT_API_URL).rstrip("/")


def default_headers(token: str | None) -> dict[str, str]:
    token = token if token is not None else os.environ.get("LAUNCHBAY_TOKEN")
    headers = {"Accept": "application/json", "User-Agent": "launchbay-client"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def backoff_delay(backoff_s: float, attempt: int, server_ms: int | None = None) -> float:
    delay = server_ms / 1000 if server_ms is not None else backoff_s * 2**attempt
    return min(max(delay, 0.0), MAX_BACKOFF_S)


class Outage:
    """Consecutive failures of one event stream: it gives up after more than `retries` of them
    that together spanned at least `window_s` seconds."""

    def __init__(self, retries: int, window_s: float) -> None:
        self.retries, self.window_s = retries, window_s
        self.failures = 0
        self.since: float | None = None

    def ended(self) -> None:
        self.failures, self.since = 0, None

    def failed(self) -> bool:
        """Count a failure; True when it is time to give up."""
        now = time.monotonic()
        self.failures += 1
        if self.since is None:
            self.since = now
        return self.failures > self.retries and now - self.since >= self.window_s


def job_path(job_id: str, *rest: str) -> str:
    """The path of a job's route: every part one segment, its '/' and '.' escaped too, so a
    part such as an artifact's `../x` reaches the API as written (httpx would resolve a bare
    `..` segment away)."""
    parts = (quote(str(part), safe="").replace(".", "%2E") for part in (job_id, *rest))
    return "/".join(["/v1/jobs", *parts])


def token_path(name: str) -> str:
    return f"/v1/tokens/{quote(name, safe='')}"


def params(**values: Any) -> JSON:
    return {key: value for key, value in values.items() if value is not None}


def items(body: Any, model: type[M]) -> list[M]:
    """The records of a `{"items": [...]}` answer (or a bare list), as `model`s."""
    records = body.get("items") if isinstance(body, dict) else body
    return [model.model_validate(record) for record in records or []]


def next_page_after(page: Any, after: int, page_size: int) -> int | None:
    """Where the next page starts, or None when `page` was the last one."""
    next_after = page.next_after
    if len(page.items) < page_size or next_after is None or next_after <= after:
        return None
    return int(next_after)


def token_body(name: str, role: str, expires_at: str | datetime | None) -> JSON:
    body: JSON = {"name": name, "role": role}
    if expires_at is not None:
        body["expires_at"] = (
            expires_at.isoformat() if isinstance(expires_at, datetime) else expires_at
        )
    return body


def usage_params(owner: str | None, since: str | datetime | None) -> dict[str, str]:
    """The query of GET /v1/usage."""
    params = {}
    if owner is not None:
        params["owner"] = owner
    if since is not None:
        params["since"] = since.isoformat() if isinstance(since, datetime) else since
    return params


def is_repeat(event_id: str | None, seen: str | None) -> bool:
    """Ids are monotonic integers (DESIGN.md), so one at or below the last seen is a replay."""
    if event_id is None or seen is None or not (event_id.isdigit() and seen.isdigit()):
        return False
    return int(event_id) <= int(seen)


def event_headers(last_event_id: str | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    return headers


def json_body(response: httpx.Response) -> Any:
    """An answer's JSON body; None when it has none (204)."""
    if response.status_code == 204 or not response.content:
        return None
    return response.json()


def poll_wait(
    job_id: str, state: str, timeout: float | None, deadline: float | None, poll_s: float
) -> float:
    """How long `wait_for_job` waits before it asks again (`deadline`, on the monotonic clock,
    is `timeout` seconds after it began); WaitTimeout once the deadline has passed."""
    left = None if deadline is None else deadline - time.monotonic()
    if left is not None and left <= 0:
        raise WaitTimeout(job_id, state, timeout or 0.0)
    return poll_s if left is None else min(poll_s, left)


def describe(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return str(exc) or type(exc).__name__


def retry_after_ms(response: httpx.Response) -> int | None:
    value = response.headers.get("Retry-After", "")
    return int(value) * 1000 if value.isdigit() else None


# Downloads


def download_target(job_id: str, ref: str, path: str | os.PathLike[str] | None) -> Path:
    default_name = f"{job_id}-{ref}.pt"
    if path is None:
        return Path.cwd() / default_name
    target = Path(path)
    return target / default_name if target.is_dir() else target


def part_of(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def resume_headers(offset: int, etag: str | None) -> dict[str, str]:
    headers = {"Accept": "*/*"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if etag:
            headers["If-Range"] = etag
    return headers


def continues(response: httpx.Response, offset: int) -> bool:
    """Whether the body carries on from `offset` (206 at that byte) rather than restarting."""
    if offset == 0:
        return True
    if response.status_code != 206:
        return False
    content_range = response.headers.get("Content-Range", "")
    return content_range.startswith(f"bytes {offset}-")


def total_size(response: httpx.Response, offset: int) -> int | None:
    content_range = response.headers.get("Content-Range", "")
    if "/" in content_range:
        total = content_range.rsplit("/", 1)[1]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length", "")
    return offset + int(length) if length.isdigit() else None


def is_tar(response: httpx.Response) -> bool:
    """Whether the download is a directory checkpoint's tar stream."""
    return response.headers.get("Content-Type", "").startswith("application/x-tar")


def etag_value(etag: str | None) -> str | None:
    if not etag:
        return None
    return etag.removeprefix("W/").strip('"')


def sha256_of(path: Path) -> "hashlib._Hash":
    hasher = hashlib.sha256()
    if path.exists():
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                hasher.update(chunk)
    return hasher


def finish_download(part: Path, target: Path, hasher: "hashlib._Hash", etag: str | None) -> Path:
    """Rename the part into place once its sha256 equals the ETag; else drop it and raise."""
    expected = etag_value(etag)
    actual = hasher.hexdigest()
    if expected is not None and expected.lower() != actual:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(str(target), expected, actual)
    part.replace(target)
    return target
