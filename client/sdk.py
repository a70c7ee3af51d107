"""The Python SDK for the Launchbay HTTP API (v1): `Client` (and `client.aio.AsyncClient`).

    with Client() as lb:                       # LAUNCHBAY_API_URL, LAUNCHBAY_TOKEN
        job = lb.submit_job({"name": "demo", "recipe": "synthetic"})
        for event in lb.stream_events(job.id): # reconnects by itself, ends with the job
            print(event.event, event.data)
        lb.download_checkpoint(job.id, "best", "model.pt")

Methods are named `verb_noun` (`submit_job`, `list_jobs`, `iter_metrics`, `create_token`)
and return the typed records of `client.models` (`Job`, `MetricPoint`, `Checkpoint`...;
`.model_dump()` gives the dict); a route answering 204 returns None.
Failures raise the tree drawn in `client.errors`:

    LaunchbayClientError
     ├── ApiError (status, code, message, detail)
     │    ├── InvalidRequest (400, 413, 422)   ├── NotFound (404)
     │    ├── Unauthorized (401)               ├── Conflict (409)
     │    ├── Forbidden (403)                  └── ServiceUnavailable (503)
     ├── ConnectionFailed                      no answer at all, after any retries
     ├── ChecksumMismatch                      download's sha256 != ETag
     └── WaitTimeout                           wait_for_job() ran out of time

Transport errors and 503 answers are retried with exponential backoff on idempotent calls
only: GET, DELETE, and `submit_job` when it carries an idempotency key. A plain POST is sent
once, since a retry could do its work twice.
"""

import os
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self, TypeVar
from urllib.parse import quote

import httpx

from client import http
from client.errors import ConnectionFailed, WaitTimeout, api_error_from_response
from client.models import (
    AuditRecord,
    Checkpoint,
    CreatedToken,
    CreatedWebhook,
    Event,
    FoundLogLine,
    Job,
    JobPage,
    LogLine,
    LogPage,
    MetricPage,
    MetricPoint,
    Node,
    Queue,
    Recipe,
    Stacks,
    Token,
    UploadedCode,
    Usage,
    Webhook,
    WebhookDelivery,
    Worker,
)
from client.sse import SSEParser
from client.unpack import unpack_checkpoint

JSON = http.JSON
ProgressCallback = http.ProgressCallback
T = TypeVar("T")


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
        reconnect_s: float = http.STREAM_RECONNECT_S,
    ) -> None:
        self.api_url = http.resolve_api_url(api_url)
        self.retries = retries
        self.backoff_s = backoff_s
        self.reconnect_s = reconnect_s
        self._http = httpx.Client(
            base_url=self.api_url,
            headers=http.default_headers(token),
            timeout=timeout,
            transport=transport,
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
        """Close the connections (`with Client() as lb:` does it on leaving)."""
        self._http.close()

    # Jobs

    def submit_job(self, spec: JSON, idempotency_key: str | None = None) -> Job:
        """Create a job (201), or get back the one made with the same key and body (200)."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = self._json(
            "POST", "/v1/jobs", json=spec, headers=headers, retry=idempotency_key is not None
        )
        return Job.model_validate(body)

    def dry_run_job(self, spec: JSON) -> dict[str, Any]:
        """What submitting `spec` would launch, nothing stored or started: the executor
        (`rq` or `slurm`), its tasks, and for a Slurm queue the `sbatch_script`."""
        body = self._json("POST", "/v1/dry-run", json=spec, retry=True)
        assert isinstance(body, dict)
        return body

    def get_job(self, job_id: str) -> Job:
        """The job as it is now (NotFound for an unknown id, or another owner's job)."""
        return Job.model_validate(self._json("GET", http.job_path(job_id)))

    def list_jobs(
        self,
        state: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        name: str | None = None,
        tag: str | None = None,
        owner: str | None = None,
    ) -> JobPage:
        """One page of jobs, newest first. `tag` is `key=value`; `owner` needs an admin token."""
        query = http.params(
            state=state, limit=limit, offset=offset, name=name, tag=tag, owner=owner
        )
        return JobPage.model_validate(self._json("GET", "/v1/jobs", params=query))

    def cancel_job(self, job_id: str) -> Job:
        """Ask a job to stop: a queued one is `cancelled` at once, a running one `cancelling`."""
        body = self._json("POST", http.job_path(job_id, "cancel"), retry=False)
        return Job.model_validate(body)

    def delete_job(self, job_id: str) -> None:
        """Delete a finished job and its files (409 while it is not terminal)."""
        self._json("DELETE", http.job_path(job_id))

    def wait_for_job(self, job_id: str, timeout: float | None = None, poll_s: float = 1.0) -> Job:
        """Poll until the job is `succeeded`, `failed` or `cancelled`, and return it.

        Raises WaitTimeout (also a TimeoutError) after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job.is_terminal():
                return job
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeout(job_id, job.state, timeout or 0.0)
            time.sleep(poll_s if left is None else min(poll_s, left))

    # What a job produces

    def list_metrics(
        self,
        job_id: str,
        name: str | None = None,
        after: int = 0,
        limit: int = 1000,
        max_points: int | None = None,
    ) -> MetricPage:
        """One page of metric points with `seq > after`; `next_after` starts the next page.

        With `max_points`, the whole series instead, at most that many points per name
        (downsampled on the server, each bucket's smallest and largest point kept), and
        `next_after` the job's seq when read: follow `stream_events` from there."""
        query = http.params(name=name, after=after, limit=limit, max_points=max_points)
        return MetricPage.model_validate(
            self._json("GET", http.job_path(job_id, "metrics"), params=query)
        )

    def iter_metrics(
        self, job_id: str, name: str | None = None, after: int = 0, page_size: int = 1000
    ) -> Iterator[MetricPoint]:
        """Every metric point after `after` (a seq), fetching page after page."""
        return _pages(lambda a: self.list_metrics(job_id, name, a, page_size), after, page_size)

    def list_logs(
        self,
        job_id: str,
        rank: int | None = None,
        after: int = 0,
        limit: int = 1000,
        node: int | None = None,
        order: str | None = None,
        before: int | None = None,
    ) -> LogPage:
        """One page of log lines with `seq > after`; `next_after` starts the next page.

        `order="desc"`: the newest lines first (the job's tail), `next_after` the job's seq
        when read (follow `stream_events` from there) and `next_before` the `before` of the
        next, older page (None when there is none)."""
        query = http.params(
            rank=rank, node=node, after=after, limit=limit, order=order, before=before
        )
        return LogPage.model_validate(
            self._json("GET", http.job_path(job_id, "logs"), params=query)
        )

    def iter_logs(
        self,
        job_id: str,
        rank: int | None = None,
        after: int = 0,
        page_size: int = 1000,
        node: int | None = None,
    ) -> Iterator[LogLine]:
        """Every log line after `after` (a seq), fetching page after page."""
        return _pages(lambda a: self.list_logs(job_id, rank, a, page_size, node), after, page_size)

    def list_nodes(self, job_id: str) -> list[Node]:
        """The nodes of every attempt of a multi-node job."""
        return http.items(self._json("GET", http.job_path(job_id, "nodes")), Node)

    def stream_events(
        self, job_id: str, last_event_id: str | None = None
    ) -> Generator[Event, None, None]:
        """Follow the job's Server-Sent Events until its terminal `state` event.

        `close()` the generator to stop early; that closes the connection.

        A dropped connection is reopened with `Last-Event-ID`, so no event is missed or
        repeated, through an API that does not answer for up to `reconnect_s` seconds (a
        restart); ConnectionFailed is raised once more than `retries` reconnects in a row,
        spanning at least that long, bring nothing. A stream that the server closes early is
        reopened too, unless the job has ended.
        """
        parser = SSEParser(last_event_id=last_event_id)
        path = http.job_path(job_id, "events")
        outage = http.Outage(self.retries, self.reconnect_s)
        while True:
            seen = parser.last_event_id
            try:
                headers = http.event_headers(parser.last_event_id)
                with self._stream("GET", path, headers=headers) as response:
                    for event in parser.parse(response.iter_lines()):
                        outage.ended()
                        if http.is_repeat(event.id, seen):
                            continue
                        seen = event.id
                        yield event
                        if event.is_terminal:
                            return
                if self.get_job(job_id).is_terminal():
                    return
            except httpx.ReadTimeout:
                continue  # a quiet stream, not a broken one: reopen at once
            except (httpx.TransportError, ConnectionFailed) as exc:
                if outage.failed():
                    if isinstance(exc, ConnectionFailed):
                        raise
                    raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
                self._backoff(outage.failures - 1, parser.retry_ms)
                continue
            self._backoff(0, parser.retry_ms or 1000)

    def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        """The job's registered checkpoints, oldest first."""
        return http.items(self._json("GET", http.job_path(job_id, "checkpoints")), Checkpoint)

    def download_checkpoint(
        self,
        job_id: str,
        ref: str = "latest",
        path: str | os.PathLike[str] | None = None,
        *,
        progress: ProgressCallback | None = None,
        unpack: bool = True,
    ) -> Path:
        """Save a checkpoint (`latest`, `best` or a checkpoint id) and return where it went.

        `path` defaults to `<job_id>-<ref>.pt` in the current directory (inside `path` when it
        is a directory). Bytes land in `<path>.part` first; an interrupted transfer, in this
        call or an earlier one, goes on from where it stopped with a Range request. The file
        is renamed into place only once its sha256 equals the server's ETag. A service that
        answers with a redirect to its object store (307) is followed, without this client's
        token, and the bytes are checked all the same.

        A directory checkpoint comes as one tar stream; with `unpack` it is unpacked into the
        directory `path` (without a `.pt`/`.tar` suffix), each file checked against the
        checkpoint's manifest, and that directory is returned.
        """
        target = http.download_target(job_id, ref, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = http.part_of(target)
        url = http.job_path(job_id, "checkpoints", ref, "download")
        hasher = http.sha256_of(part)
        etag: str | None = None
        is_tar = False
        failures = 0
        while True:
            offset = part.stat().st_size if part.exists() else 0
            headers = http.resume_headers(offset, etag)
            try:
                with self._download_stream(url, headers) as (response, announced):
                    is_tar = http.is_tar(response)
                    if not http.continues(response, offset):
                        # The server sends the whole file (200), or its part no longer fits the
                        # one we hold (416, another 206): drop ours and take the whole.
                        part.unlink(missing_ok=True)
                        hasher, offset = http.sha256_of(part), 0
                        if response.status_code != 200:
                            continue
                    etag = announced or etag
                    total = http.total_size(response, offset)
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
                    raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
                self._backoff(failures - 1)
        saved = http.finish_download(part, target, hasher, etag)
        return self._unpacked(job_id, saved, etag) if unpack and is_tar else saved

    @contextmanager
    def _download_stream(
        self, url: str, headers: dict[str, str]
    ) -> Iterator[tuple[httpx.Response, str | None]]:
        """(the response carrying the bytes, the sha256 ETag the API announced)."""
        with self._stream("GET", url, headers=headers, ok=(416,)) as response:
            etag = response.headers.get("ETag")
            location = response.headers.get("Location")
            if response.status_code != 307 or not location:
                yield response, etag
                return
        # The store's URL is signed for this object: no token, no If-Range (its ETag differs).
        store_headers = {k: v for k, v in headers.items() if k.lower() != "if-range"}
        with httpx.Client(timeout=self._http.timeout) as plain:
            with plain.stream("GET", location, headers=store_headers) as redirected:
                if redirected.is_error and redirected.status_code != 416:
                    redirected.read()
                    raise api_error_from_response(redirected)
                yield redirected, etag

    def _unpacked(self, job_id: str, saved: Path, etag: str | None) -> Path:
        """A directory checkpoint's tar unpacked beside it (and removed); a file as it is."""
        sha = http.etag_value(etag)
        found = [c for c in self.list_checkpoints(job_id) if c.sha256 == sha]
        if not found or found[0].kind != "dir":
            return saved
        directory = saved.with_name(saved.name.removesuffix(".pt").removesuffix(".tar"))
        if directory == saved:
            directory = saved.with_name(f"{saved.name}.d")
        unpack_checkpoint(saved, directory, found[0].manifest or [])
        saved.unlink()
        return directory

    # Code, recipes, workers, service

    def upload_code(self, path: str | os.PathLike[str]) -> UploadedCode:
        """Upload a `.py`, `.zip` or `.tar.gz`; use its `code_id` in a spec's `code`."""
        file = Path(path)
        with file.open("rb") as fh:
            files: dict[str, tuple[str, BinaryIO, str]] = {
                "file": (file.name, fh, "application/octet-stream")
            }
            body = self._json("POST", "/v1/code", files=files, retry=False)
        return UploadedCode.model_validate(body)

    def list_recipes(self) -> list[Recipe]:
        """The built-in training programs, each with its config's JSON Schema."""
        return http.items(self._json("GET", "/v1/recipes"), Recipe)

    def list_workers(self) -> list[Worker]:
        """The workers seen: queues, devices, last heartbeat, current job."""
        return http.items(self._json("GET", "/v1/workers"), Worker)

    def get_queue(self) -> Queue:
        """What waits, in the order it will run, with why each job waits."""
        return Queue.model_validate(self._json("GET", "/v1/queue"))

    def get_usage(self, owner: str | None = None, since: str | datetime | None = None) -> Usage:
        """Device-seconds per owner since `since` (default: one quota period ago); a user
        sees only their own."""
        params = http.usage_params(owner, since)
        return Usage.model_validate(self._json("GET", "/v1/usage", params=params))

    def get_health(self) -> JSON:
        """`{"status": "ok"}` while the API process lives."""
        return dict(self._json("GET", "/v1/health"))

    def get_readiness(self) -> JSON:
        """`{...}` when the database and Redis answer; ServiceUnavailable names what does not."""
        return dict(self._json("GET", "/v1/ready", retry=False))

    # Tokens (admin only)

    def create_token(
        self, name: str, role: str = "user", expires_at: str | datetime | None = None
    ) -> CreatedToken:
        """Make a token; its secret (`token`) is shown this once."""
        body = http.token_body(name, role, expires_at)
        return CreatedToken.model_validate(self._json("POST", "/v1/tokens", json=body, retry=False))

    def list_tokens(self) -> list[Token]:
        """Every token (never the secrets)."""
        return http.items(self._json("GET", "/v1/tokens"), Token)

    def revoke_token(self, name: str) -> None:
        """Revoke a token by name; requests carrying it are refused from now on."""
        self._json("DELETE", http.token_path(name))

    # Operations: webhooks, ranks' stacks, log search, the audit log

    def create_webhook(
        self, url: str, events: list[str], format: str = "json", all_jobs: bool = False
    ) -> CreatedWebhook:
        """Register an endpoint for jobs' events (`state`, `terminal`, `checkpoint`, `best`);
        the secret that signs its deliveries is shown this once."""
        body = {"url": url, "events": events, "format": format, "all_jobs": all_jobs}
        answer = self._json("POST", "/v1/webhooks", json=body, retry=False)
        return CreatedWebhook.model_validate(answer)

    def list_webhooks(self) -> list[Webhook]:
        """Your webhooks (an admin: everyone's), without their secrets."""
        return http.items(self._json("GET", "/v1/webhooks"), Webhook)

    def delete_webhook(self, webhook_id: str) -> None:
        """Remove a webhook and its deliveries."""
        self._json("DELETE", f"/v1/webhooks/{quote(webhook_id, safe='')}")

    def list_deliveries(
        self, webhook_id: str, job_id: str | None = None, limit: int = 100
    ) -> list[WebhookDelivery]:
        """An endpoint's deliveries, newest first (optionally one job's)."""
        path = f"/v1/webhooks/{quote(webhook_id, safe='')}/deliveries"
        answer = self._json("GET", path, params=http.params(job_id=job_id, limit=limit))
        return http.items(answer, WebhookDelivery)

    def redeliver(self, webhook_id: str, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again (same id and body)."""
        path = (
            f"/v1/webhooks/{quote(webhook_id, safe='')}/deliveries/"
            f"{quote(delivery_id, safe='')}/redeliver"
        )
        return WebhookDelivery.model_validate(self._json("POST", path, retry=False))

    def request_stacks(self, job_id: str) -> None:
        """Ask a running job's worker to record every rank's Python stack now."""
        self._json("POST", http.job_path(job_id, "stacks"), retry=False)

    def get_stacks(self, job_id: str) -> Stacks:
        """The ranks' recorded stacks, newest capture first, with a summary of the latest."""
        return Stacks.model_validate(self._json("GET", http.job_path(job_id, "stacks")))

    def search_job_logs(
        self,
        job_id: str,
        q: str,
        regex: bool = False,
        rank: int | None = None,
        after: int = 0,
        limit: int = 1000,
    ) -> LogPage:
        """One page of a job's lines that contain `q` (or match it, with `regex`)."""
        query = http.params(q=q, regex="true" if regex else None, rank=rank, after=after)
        query["limit"] = limit
        return LogPage.model_validate(
            self._json("GET", http.job_path(job_id, "logs"), params=query)
        )

    def search_logs(
        self,
        q: str,
        regex: bool = False,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        limit: int = 100,
    ) -> list[FoundLogLine]:
        """Lines of the caller's jobs (an admin: every job) that match, newest first."""
        query = http.params(
            q=q,
            regex="true" if regex else None,
            since=since.isoformat() if isinstance(since, datetime) else since,
            until=until.isoformat() if isinstance(until, datetime) else until,
            limit=limit,
        )
        return http.items(self._json("GET", "/v1/logs", params=query), FoundLogLine)

    def list_audit_records(
        self,
        owner: str | None = None,
        kind: str | None = None,
        since: str | datetime | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Admin only: state-changing requests, newest first."""
        query = http.params(
            owner=owner,
            kind=kind,
            since=since.isoformat() if isinstance(since, datetime) else since,
            limit=limit,
        )
        return http.items(self._json("GET", "/v1/audit", params=query), AuditRecord)

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
            retry = method in http.IDEMPOTENT_METHODS
        attempt = 0
        while True:
            try:
                request = self._http.build_request(method, path, **kwargs)
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                if not retry or attempt >= self.retries:
                    raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
                self._backoff(attempt)
                attempt += 1
                continue
            if response.status_code == 503 and retry and attempt < self.retries:
                response.close()
                self._backoff(attempt, http.retry_after_ms(response))
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
        delay = http.backoff_delay(self.backoff_s, attempt, server_ms)
        if delay > 0:
            time.sleep(delay)


def _pages(fetch: Callable[[int], Any], after: int, page_size: int) -> Iterator[Any]:
    while True:
        page = fetch(after)
        yield from page.items
        next_after = http.next_page_after(page, after, page_size)
        if next_after is None:
            return
        after = next_after
