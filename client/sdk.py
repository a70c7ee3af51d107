"""The Python SDK for the Launchbay HTTP API (v1).

    with Client() as lb:                       # LAUNCHBAY_API_URL, LAUNCHBAY_TOKEN
        job = lb.submit({"name": "demo", "recipe": "synthetic"}, idempotency_key="demo-1")
        for event in lb.events(job["id"]):     # reconnects by itself, ends with the job
            print(event.event, event.data)
        lb.download(job["id"], "best", "model.pt")

Every method returns the decoded JSON body of its route (see DESIGN.md), None for a 204.
Failures raise the tree drawn in `client.errors`:

    LaunchbayClientError
     ├── ApiError (status, code, message, detail)
     │    ├── InvalidRequest (400, 413, 422)   ├── NotFound (404)
     │    ├── Unauthorized (401)               ├── Conflict (409)
     │    ├── Forbidden (403)                  └── ServiceUnavailable (503)
     ├── ConnectionFailed                      no answer at all, after any retries
     ├── ChecksumMismatch                      download's sha256 != ETag
     └── WaitTimeout                           wait() ran out of time (also a TimeoutError)

Transport errors and 503 answers are retried with exponential backoff on idempotent calls
only: GET, DELETE, and `submit` when it carries an idempotency key. A plain POST is sent
once, since a retry could do its work twice.
"""

import hashlib
import os
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self
from urllib.parse import quote

import httpx

from client.errors import (
    ChecksumMismatch,
    ConnectionFailed,
    WaitTimeout,
    api_error_from_response,
)
from client.sse import TERMINAL_STATES, Event, SSEParser

DEFAULT_API_URL = "http://127.0.0.1:8000"
MAX_BACKOFF_S = 10.0
CHUNK_BYTES = 1024 * 1024

JSON = dict[str, Any]
ProgressCallback = Callable[[int, int | None], None]
"""Called as `(bytes_done, bytes_total)` while a download runs; the total may be unknown."""


class Client:
    """A connection to one Launchbay API; use it as a context manager or call `close()`."""

    def __init__(
        self,
        api_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        retries: int = 3,
        backoff_s: float = 0.5,
    ) -> None:
        self.api_url = (api_url or os.environ.get("LAUNCHBAY_API_URL") or DEFAULT_API_URL).rstrip(
            "/"
        )
        token = token if token is not None else os.environ.get("LAUNCHBAY_TOKEN")
        headers = {"Accept": "application/json", "User-Agent": "launchbay-client"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.retries = retries
        self.backoff_s = backoff_s
        self._http = httpx.Client(
            base_url=self.api_url, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # Jobs

    def submit(self, spec: JSON, idempotency_key: str | None = None) -> JSON:
        """Create a job (201), or get back the one made with the same key and body (200)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._json(
            "POST", "/v1/jobs", json=spec, headers=headers, retry=idempotency_key is not None
        )

    def get(self, job_id: str) -> JSON:
        return self._json("GET", _job_path(job_id))

    def list(self, state: str | None = None, limit: int = 50, offset: int = 0) -> JSON:
        """One page of jobs, newest first: `{"items": [Job], "total": N}`."""
        params = _params(state=state, limit=limit, offset=offset)
        return self._json("GET", "/v1/jobs", params=params)

    def cancel(self, job_id: str) -> JSON:
        return self._json("POST", _job_path(job_id, "cancel"), retry=False)

    def delete(self, job_id: str) -> None:
        """Delete a finished job and its files (409 while it is not terminal)."""
        self._json("DELETE", _job_path(job_id))

    def wait(self, job_id: str, timeout: float | None = None, poll_s: float = 1.0) -> JSON:
        """Poll until the job is `succeeded`, `failed` or `cancelled`, and return it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if job["state"] in TERMINAL_STATES:
                return job
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeout(job_id, job["state"], timeout or 0.0)
            time.sleep(poll_s if left is None else min(poll_s, left))

    # What a job produces

    def metrics(
        self, job_id: str, name: str | None = None, after: int = 0, limit: int = 1000
    ) -> JSON:
        """One page of metric points with `seq > after`: `{"items": [...], "next_after": seq}`."""
        params = _params(name=name, after=after, limit=limit)
        return self._json("GET", _job_path(job_id, "metrics"), params=params)

    def iter_metrics(
        self, job_id: str, name: str | None = None, after: int = 0, page_size: int = 1000
    ) -> Iterator[JSON]:
        """Every metric point after `after`, fetching page after page."""
        return _pages(lambda a: self.metrics(job_id, name, a, page_size), after, page_size)

    def logs(
        self,
        job_id: str,
        rank: int | None = None,
        after: int = 0,
        limit: int = 1000,
        node: int | None = None,
    ) -> JSON:
        """One page of log lines with `seq > after`: `{"items": [...], "next_after": seq}`."""
        params = _params(rank=rank, node=node, after=after, limit=limit)
        return self._json("GET", _job_path(job_id, "logs"), params=params)

    def iter_logs(
        self,
        job_id: str,
        rank: int | None = None,
        after: int = 0,
        page_size: int = 1000,
        node: int | None = None,
    ) -> Iterator[JSON]:
        """Every log line after `after`, fetching page after page."""
        return _pages(lambda a: self.logs(job_id, rank, a, page_size, node), after, page_size)

    def nodes(self, job_id: str) -> JSON:
        """The nodes of every attempt of a multi-node job: `{"items": [...]}`."""
        return self._json("GET", _job_path(job_id, "nodes"))

    def events(self, job_id: str, last_event_id: str | None = None) -> Generator[Event, None, None]:
        """Follow the job's Server-Sent Events until its terminal `state` event.

        `close()` the generator to stop early; that closes the connection.

        A dropped connection is reopened with `Last-Event-ID`, so no event is missed or
        repeated; ConnectionFailed is raised once `retries` reconnects in a row bring nothing.
        A stream that the server closes early is reopened too, unless the job has ended.
        """
        parser = SSEParser(last_event_id=last_event_id)
        path = _job_path(job_id, "events")
        failures = 0
        while True:
            headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
            if parser.last_event_id is not None:
                headers["Last-Event-ID"] = parser.last_event_id
            seen = parser.last_event_id
            try:
                with self._stream("GET", path, headers=headers) as response:
                    for event in parser.parse(response.iter_lines()):
                        failures = 0
                        if _is_repeat(event.id, seen):
                            continue
                        seen = event.id
                        yield event
                        if event.is_terminal:
                            return
            except httpx.ReadTimeout:
                continue  # a quiet stream, not a broken one: reopen at once
            except httpx.TransportError as exc:
                failures += 1
                if failures > self.retries:
                    raise ConnectionFailed(self.api_url, _describe(exc)) from exc
                self._backoff(failures - 1, parser.retry_ms)
                continue
            if self.get(job_id)["state"] in TERMINAL_STATES:
                return
            self._backoff(0, parser.retry_ms or 1000)

    def checkpoints(self, job_id: str) -> JSON:
        return self._json("GET", _job_path(job_id, "checkpoints"))

    def download(
        self,
        job_id: str,
        ref: str = "latest",
        path: str | os.PathLike[str] | None = None,
        *,
        progress: ProgressCallback | None = None,
    ) -> Path:
        """Save a checkpoint (`latest`, `best` or a checkpoint id) and return where it went.

        `path` defaults to `<job_id>-<ref>.pt` in the current directory (inside `path` when it
        is a directory). Bytes land in `<path>.part` first; an interrupted transfer, in this
        call or an earlier one, goes on from where it stopped with a Range request. The file
        is renamed into place only once its sha256 equals the server's ETag.
        """
        target = _download_target(job_id, ref, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        url = _job_path(job_id, "checkpoints", ref, "download")
        hasher = _sha256_of(part) if part.exists() else hashlib.sha256()
        etag: str | None = None
        failures = 0
        while True:
            offset = part.stat().st_size if part.exists() else 0
            headers = {"Accept": "*/*"}
            if offset:
                headers["Range"] = f"bytes={offset}-"
                if etag:
                    headers["If-Range"] = etag
            try:
                with self._stream("GET", url, headers=headers, ok=(416,)) as response:
                    if not _continues(response, offset):
                        # The server sends the whole file (200), or its part no longer fits the
                        # one we hold (416, another 206): drop ours and take the whole.
                        part.unlink(missing_ok=True)
                        hasher, offset = hashlib.sha256(), 0
                        if response.status_code != 200:
                            continue
                    etag = response.headers.get("ETag", etag)
                    total = _total_size(response, offset)
                    with part.open("ab") as out:
                        for chunk in response.iter_bytes():
                            out.write(chunk)
                            hasher.update(chunk)
                            offset += len(chunk)
                            failures = 0
                            if progress:
                                progress(offset, total)
                break
            except httpx.TransportError as exc:
                failures += 1
                if failures > self.retries:
                    raise ConnectionFailed(self.api_url, _describe(exc)) from exc
                self._backoff(failures - 1)
        expected = _etag_value(etag)
        actual = hasher.hexdigest()
        if expected is not None and expected.lower() != actual:
            part.unlink(missing_ok=True)
            raise ChecksumMismatch(str(target), expected, actual)
        part.replace(target)
        return target

    # Code, recipes, workers, service

    def upload_code(self, path: str | os.PathLike[str]) -> JSON:
        """Upload a `.py`, `.zip` or `.tar.gz`: `{"code_id", "sha256", "size"}`."""
        file = Path(path)
        with file.open("rb") as fh:
            files: dict[str, tuple[str, BinaryIO, str]] = {
                "file": (file.name, fh, "application/octet-stream")
            }
            return self._json("POST", "/v1/code", files=files, retry=False)

    def recipes(self) -> JSON:
        return self._json("GET", "/v1/recipes")

    def workers(self) -> Any:
        return self._json("GET", "/v1/workers")

    def health(self) -> JSON:
        return self._json("GET", "/v1/health")

    def ready(self) -> JSON:
        """`{...}` when the database and Redis answer; ServiceUnavailable names what does not."""
        return self._json("GET", "/v1/ready", retry=False)

    # Tokens (admin only)

    def create_token(
        self, name: str, role: str = "user", expires_at: str | datetime | None = None
    ) -> JSON:
        """Make a token: `{"name", "role", "token"}`; the secret is shown this once."""
        body: JSON = {"name": name, "role": role}
        if expires_at is not None:
            body["expires_at"] = (
                expires_at.isoformat() if isinstance(expires_at, datetime) else expires_at
            )
        return self._json("POST", "/v1/tokens", json=body, retry=False)

    def list_tokens(self) -> Any:
        return self._json("GET", "/v1/tokens")

    def revoke_token(self, name: str) -> None:
        self._json("DELETE", f"/v1/tokens/{quote(name, safe='')}")

    # Plumbing

    def _json(self, method: str, path: str, *, retry: bool | None = None, **kwargs: Any) -> Any:
        response = self._send(method, path, retry=retry, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @contextmanager
    def _stream(
        self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any
    ) -> Iterator[httpx.Response]:
        response = self._send(method, path, stream=True, ok=ok, **kwargs)
        try:
            yield response
        finally:
            response.close()

    def _send(
        self,
        method: str,
        path: str,
        *,
        retry: bool | None = None,
        stream: bool = False,
        ok: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> httpx.Response:
        """Send one request, retrying when it is safe; raise ApiError on an error status."""
        if retry is None:
            retry = method in ("GET", "HEAD", "DELETE")
        attempt = 0
        while True:
            try:
                request = self._http.build_request(method, path, **kwargs)
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                if not retry or attempt >= self.retries:
                    raise ConnectionFailed(self.api_url, _describe(exc)) from exc
                self._backoff(attempt)
                attempt += 1
                continue
            if response.status_code == 503 and retry and attempt < self.retries:
                response.close()
                self._backoff(attempt, _retry_after_ms(response))
                attempt += 1
                continue
            if response.is_error and response.status_code not in ok:
                try:
                    response.read()
                finally:
                    response.close()
                raise api_error_from_response(response)
            return response

    def _backoff(self, attempt: int, server_ms: int | None = None) -> None:
        delay = server_ms / 1000 if server_ms is not None else self.backoff_s * 2**attempt
        if delay > 0:
            time.sleep(min(delay, MAX_BACKOFF_S))


def _job_path(job_id: str, *rest: str) -> str:
    return "/".join(["/v1/jobs", *(quote(str(part), safe="") for part in (job_id, *rest))])


def _params(**values: Any) -> JSON:
    return {key: value for key, value in values.items() if value is not None}


def _pages(fetch: Callable[[int], JSON], after: int, page_size: int) -> Iterator[JSON]:
    while True:
        page = fetch(after)
        items = page.get("items") or []
        yield from items
        next_after = page.get("next_after")
        if len(items) < page_size or next_after is None or next_after <= after:
            return
        after = next_after


def _is_repeat(event_id: str | None, seen: str | None) -> bool:
    """Ids are monotonic integers (DESIGN.md), so one at or below the last seen is a replay."""
    if event_id is None or seen is None or not (event_id.isdigit() and seen.isdigit()):
        return False
    return int(event_id) <= int(seen)


def _describe(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return str(exc) or type(exc).__name__


def _retry_after_ms(response: httpx.Response) -> int | None:
    value = response.headers.get("Retry-After", "")
    return int(value) * 1000 if value.isdigit() else None


def _download_target(job_id: str, ref: str, path: str | os.PathLike[str] | None) -> Path:
    default_name = f"{job_id}-{ref}.pt"
    if path is None:
        return Path.cwd() / default_name
    target = Path(path)
    return target / default_name if target.is_dir() else target


def _continues(response: httpx.Response, offset: int) -> bool:
    """Whether the body carries on from `offset` (206 at that byte) rather than restarting."""
    if offset == 0:
        return True
    if response.status_code != 206:
        return False
    content_range = response.headers.get("Content-Range", "")
    return content_range.startswith(f"bytes {offset}-")


def _total_size(response: httpx.Response, offset: int) -> int | None:
    content_range = response.headers.get("Content-Range", "")
    if "/" in content_range:
        total = content_range.rsplit("/", 1)[1]
        return int(total) if total.isdigit() else None
    length = response.headers.get("Content-Length", "")
    return offset + int(length) if length.isdigit() else None


def _etag_value(etag: str | None) -> str | None:
    if not etag:
        return None
    return etag.removeprefix("W/").strip('"')


def _sha256_of(path: Path) -> "hashlib._Hash":
    hasher = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            hasher.update(chunk)
    return hasher
