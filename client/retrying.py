"""How the clients carry on through failures, written once for `Client` and `AsyncClient`:
one request's retries, an event stream followed across reconnects, a download resumed
across broken connections.

Nothing here waits or touches the network: each object says what to send and how long to
back off (as the `(attempt, server's retry ms)` that a client's `_backoff` takes), and the
client does it, blocking or awaiting.
"""

import os
from pathlib import Path
from typing import BinaryIO

import httpx

from client import http
from client.errors import ConnectionFailed
from client.models import Event
from client.sse import SSEParser

Backoff = tuple[int, int | None]
"""What a client's `_backoff` takes: the attempt (0 first) and the server's retry in ms."""


class RequestRetries:
    """One request's retries: transport errors and 503 answers are retried, with backoff, on a
    request that may be sent again (`retry`, or by default an idempotent method)."""

    def __init__(self, method: str, retry: bool | None, retries: int, api_url: str) -> None:
        self.retry = method in http.IDEMPOTENT_METHODS if retry is None else retry
        self.retries, self.api_url = retries, api_url
        self.attempt = 0

    def after_error(self, exc: httpx.TransportError) -> Backoff:
        """The backoff before sending again; ConnectionFailed when it may not be sent again."""
        if not self.retry or self.attempt >= self.retries:
            raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
        self.attempt += 1
        return self.attempt - 1, None

    def after_answer(self, response: httpx.Response) -> Backoff | None:
        """The backoff before sending again after a 503; None: the answer is the one."""
        if response.status_code != 503 or not self.retry or self.attempt >= self.retries:
            return None
        self.attempt += 1
        return self.attempt - 1, http.retry_after_ms(response)


class EventFollow:
    """A job's event stream followed across connections (`stream_events`): each connection
    resumes after the last complete event (`Last-Event-ID`), and an event seen already is not
    given twice; the client gives up once reconnects bring nothing for long enough
    (`http.Outage`)."""

    def __init__(
        self,
        job_id: str,
        last_event_id: str | None,
        retries: int,
        reconnect_s: float,
        api_url: str,
    ) -> None:
        self.parser = SSEParser(last_event_id=last_event_id)
        self.path = http.job_path(job_id, "events")
        self.outage = http.Outage(retries, reconnect_s)
        self.api_url = api_url
        self.seen = last_event_id

    def connecting(self) -> dict[str, str]:
        """The headers of the next connection; a half-read event of the last one is forgotten."""
        self.seen = self.parser.last_event_id
        self.parser.reset()
        return http.event_headers(self.parser.last_event_id)

    def feed(self, line: str) -> Event | None:
        """Take one line of the stream; the event it completes, unless it was given already."""
        event = self.parser.feed(line)
        if event is None:
            return None
        self.outage.ended()
        if http.is_repeat(event.id, self.seen):
            return None
        self.seen = event.id
        return event

    def failed(self, exc: httpx.TransportError | ConnectionFailed) -> Backoff:
        """A connection failed: the backoff before the next, or ConnectionFailed when the
        outage has lasted too long."""
        if self.outage.failed():
            if isinstance(exc, ConnectionFailed):
                raise exc
            raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
        return self.outage.failures - 1, self.parser.retry_ms

    def closed(self) -> Backoff:
        """The server closed the stream before the job ended: the wait before reopening."""
        return 0, self.parser.retry_ms or 1000


class Download:
    """One checkpoint download (`download_checkpoint`): bytes land in `<target>.part`, a broken
    transfer goes on from where it stopped with a Range request, and the part is renamed into
    place once its sha256 equals the server's ETag (`finish`)."""

    def __init__(
        self,
        job_id: str,
        ref: str,
        path: str | os.PathLike[str] | None,
        retries: int,
        api_url: str,
    ) -> None:
        self.target = http.download_target(job_id, ref, path)
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.part = http.part_of(self.target)
        self.url = http.job_path(job_id, "checkpoints", ref, "download")
        self.hasher = http.sha256_of(self.part)
        self.retries, self.api_url = retries, api_url
        self.etag: str | None = None
        self.is_tar = False
        self.failures = 0
        self.offset = 0
        self.total: int | None = None

    def headers(self) -> dict[str, str]:
        """The next request's headers: a Range from the end of the part held."""
        self.offset = self.part.stat().st_size if self.part.exists() else 0
        return http.resume_headers(self.offset, self.etag)

    def begin(self, response: httpx.Response, announced: str | None) -> bool:
        """Whether `response` carries the bytes to append; False: ask again (the part held was
        dropped). `announced` is the ETag the API gave."""
        self.is_tar = http.is_tar(response)
        if not http.continues(response, self.offset):
            # The server sends the whole file (200), or its part no longer fits the one we hold
            # (416, another 206): drop ours and take the whole.
            self.part.unlink(missing_ok=True)
            self.hasher, self.offset = http.sha256_of(self.part), 0
            if response.status_code != 200:
                return False
        self.etag = announced or self.etag
        self.total = http.total_size(response, self.offset)
        return True

    def write(self, out: BinaryIO, chunk: bytes, progress: http.ProgressCallback | None) -> None:
        out.write(chunk)
        self.hasher.update(chunk)
        self.offset += len(chunk)
        self.failures = 0
        if progress:
            progress(self.offset, self.total)

    def failed(self, exc: httpx.TransportError) -> Backoff:
        """The transfer broke: the backoff before resuming, or ConnectionFailed after more
        than `retries` breaks in a row."""
        self.failures += 1
        if self.failures > self.retries:
            raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
        return self.failures - 1, None

    def finish(self) -> Path:
        """The part renamed into place once its sha256 equals the ETag (ChecksumMismatch)."""
        return http.finish_download(self.part, self.target, self.hasher, self.etag)


def redirect_to_store(
    response: httpx.Response, headers: dict[str, str]
) -> tuple[str, dict[str, str]] | None:
    """Where a 307 answer sends a download, and the headers to ask there with; None when the
    answer carries the bytes itself. The store's URL is signed for the object: it gets no
    token (a plain httpx client) and no If-Range (its ETag differs)."""
    location = response.headers.get("Location")
    if response.status_code != 307 or not location:
        return None
    return location, {k: v for k, v in headers.items() if k.lower() != "if-range"}
