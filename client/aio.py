"""`AsyncClient`: the SDK's surface on `httpx.AsyncClient`, for services that submit many jobs.

    async with AsyncClient() as lb:
        jobs = await asyncio.gather(*(lb.submit_job(spec) for spec in specs))
        async for point in lb.iter_metrics(jobs[0].id):
            ...

Every method of `client.Client` is here under the same name, with the same arguments and
return types; the iterators (`iter_metrics`, `iter_logs`, `stream_events`) are async ones.
The same retry rules and errors apply (see `client.sdk`).
"""

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Self
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

JSON = http.JSON


class AsyncClient:
    """An asynchronous connection to one Launchbay API; `async with` it or `await aclose()`."""

    def __init__(
        self,
        api_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        retries: int = 3,
        backoff_s: float = 0.5,
        reconnect_s: float = http.STREAM_RECONNECT_S,
    ) -> None:
        self.api_url = http.resolve_api_url(api_url)
        self.retries = retries
        self.backoff_s = backoff_s
        self.reconnect_s = reconnect_s
        self._http = httpx.AsyncClient(
            base_url=self.api_url,
            headers=http.default_headers(token),
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # Jobs

    async def submit_job(self, spec: JSON, idempotency_key: str | None = None) -> Job:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = await self._json(
            "POST", "/v1/jobs", json=spec, headers=headers, retry=idempotency_key is not None
        )
        return Job.model_validate(body)

    async def dry_run_job(self, spec: JSON) -> dict[str, Any]:
        body = await self._json("POST", "/v1/dry-run", json=spec, retry=True)
        assert isinstance(body, dict)
        return body

    async def get_job(self, job_id: str) -> Job:
        return Job.model_validate(await self._json("GET", http.job_path(job_id)))

    async def list_jobs(
        self,
        state: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        name: str | None = None,
        tag: str | None = None,
        owner: str | None = None,
    ) -> JobPage:
        query = http.params(
            state=state, limit=limit, offset=offset, name=name, tag=tag, owner=owner
        )
        return JobPage.model_validate(await self._json("GET", "/v1/jobs", params=query))

    async def cancel_job(self, job_id: str) -> Job:
        body = await self._json("POST", http.job_path(job_id, "cancel"), retry=False)
        return Job.model_validate(body)

    async def delete_job(self, job_id: str) -> None:
        await self._json("DELETE", http.job_path(job_id))

    async def wait_for_job(
        self, job_id: str, timeout: float | None = None, poll_s: float = 1.0
    ) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = await self.get_job(job_id)
            if job.is_terminal():
                return job
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise WaitTimeout(job_id, job.state, timeout or 0.0)
            await asyncio.sleep(poll_s if left is None else min(poll_s, left))

    # What a job produces

    async def list_metrics(
        self,
        job_id: str,
        name: str | None = None,
        after: int = 0,
        limit: int = 1000,
        max_points: int | None = None,
    ) -> MetricPage:
        query = http.params(name=name, after=after, limit=limit, max_points=max_points)
        body = await self._json("GET", http.job_path(job_id, "metrics"), params=query)
        return MetricPage.model_validate(body)

    def iter_metrics(
        self, job_id: str, name: str | None = None, after: int = 0, page_size: int = 1000
    ) -> AsyncIterator[MetricPoint]:
        return _pages(lambda a: self.list_metrics(job_id, name, a, page_size), after, page_size)

    async def list_logs(
        self,
        job_id: str,
        rank: int | None = None,
        after: int = 0,
        limit: int = 1000,
        node: int | None = None,
        order: str | None = None,
        before: int | None = None,
    ) -> LogPage:
        query = http.params(
            rank=rank, node=node, after=after, limit=limit, order=order, before=before
        )
        body = await self._json("GET", http.job_path(job_id, "logs"), params=query)
        return LogPage.model_validate(body)

    def iter_logs(
        self,
        job_id: str,
        rank: int | None = None,
        after: int = 0,
        page_size: int = 1000,
        node: int | None = None,
    ) -> AsyncIterator[LogLine]:
        return _pages(lambda a: self.list_logs(job_id, rank, a, page_size, node), after, page_size)

    async def list_nodes(self, job_id: str) -> list[Node]:
        return http.items(await self._json("GET", http.job_path(job_id, "nodes")), Node)

    async def stream_events(
        self, job_id: str, last_event_id: str | None = None
    ) -> AsyncIterator[Event]:
        """As `Client.stream_events`: resumes with Last-Event-ID, ends with the job."""
        parser = SSEParser(last_event_id=last_event_id)
        path = http.job_path(job_id, "events")
        outage = http.Outage(self.retries, self.reconnect_s)
        while True:
            seen = parser.last_event_id
            try:
                headers = http.event_headers(parser.last_event_id)
                async with self._stream("GET", path, headers=headers) as response:
                    parser.reset()  # a new connection: forget a half-read event
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is None:
                            continue
                        outage.ended()
                        if http.is_repeat(event.id, seen):
                            continue
                        seen = event.id
                        yield event
                        if event.is_terminal:
                            return
                if (await self.get_job(job_id)).is_terminal():
                    return
            except httpx.ReadTimeout:
                continue
            except (httpx.TransportError, ConnectionFailed) as exc:
                if outage.failed():
                    if isinstance(exc, ConnectionFailed):
                        raise
                    raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
                await self._backoff(outage.failures - 1, parser.retry_ms)
                continue
            await self._backoff(0, parser.retry_ms or 1000)

    async def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        body = await self._json("GET", http.job_path(job_id, "checkpoints"))
        return http.items(body, Checkpoint)

    async def download_checkpoint(
        self,
        job_id: str,
        ref: str = "latest",
        path: str | os.PathLike[str] | None = None,
        *,
        progress: http.ProgressCallback | None = None,
    ) -> Path:
        """As `Client.download_checkpoint`: resumes with Range, follows a redirect to the
        object store, checks the sha256 (a directory checkpoint is saved as its tar)."""
        target = http.download_target(job_id, ref, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = http.part_of(target)
        url = http.job_path(job_id, "checkpoints", ref, "download")
        hasher = http.sha256_of(part)
        etag: str | None = None
        failures = 0
        while True:
            offset = part.stat().st_size if part.exists() else 0
            headers = http.resume_headers(offset, etag)
            try:
                async with self._download_stream(url, headers) as (response, announced):
                    if not http.continues(response, offset):
                        part.unlink(missing_ok=True)
                        hasher, offset = http.sha256_of(part), 0
                        if response.status_code != 200:
                            continue
                    etag = announced or etag
                    total = http.total_size(response, offset)
                    with part.open("ab") as out:
                        async for chunk in response.aiter_bytes():
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
                await self._backoff(failures - 1)
        return http.finish_download(part, target, hasher, etag)

    # Code, recipes, workers, service

    async def upload_code(self, path: str | os.PathLike[str]) -> UploadedCode:
        file = Path(path)
        with file.open("rb") as fh:
            files: dict[str, tuple[str, BinaryIO, str]] = {
                "file": (file.name, fh, "application/octet-stream")
            }
            body = await self._json("POST", "/v1/code", files=files, retry=False)
        return UploadedCode.model_validate(body)

    async def list_recipes(self) -> list[Recipe]:
        return http.items(await self._json("GET", "/v1/recipes"), Recipe)

    async def list_workers(self) -> list[Worker]:
        return http.items(await self._json("GET", "/v1/workers"), Worker)

    async def get_queue(self) -> Queue:
        return Queue.model_validate(await self._json("GET", "/v1/queue"))

    async def get_usage(
        self, owner: str | None = None, since: str | datetime | None = None
    ) -> Usage:
        params = http.usage_params(owner, since)
        return Usage.model_validate(await self._json("GET", "/v1/usage", params=params))

    async def get_health(self) -> JSON:
        return dict(await self._json("GET", "/v1/health"))

    async def get_readiness(self) -> JSON:
        return dict(await self._json("GET", "/v1/ready", retry=False))

    # Tokens (admin only)

    async def create_token(
        self, name: str, role: str = "user", expires_at: str | datetime | None = None
    ) -> CreatedToken:
        body = http.token_body(name, role, expires_at)
        answer = await self._json("POST", "/v1/tokens", json=body, retry=False)
        return CreatedToken.model_validate(answer)

    async def list_tokens(self) -> list[Token]:
        return http.items(await self._json("GET", "/v1/tokens"), Token)

    async def revoke_token(self, name: str) -> None:
        await self._json("DELETE", http.token_path(name))

    # Operations: webhooks, ranks' stacks, log search, the audit log

    async def create_webhook(
        self, url: str, events: list[str], format: str = "json", all_jobs: bool = False
    ) -> CreatedWebhook:
        """Register an endpoint for jobs' events (`state`, `terminal`, `checkpoint`, `best`);
        the secret that signs its deliveries is shown this once."""
        body = {"url": url, "events": events, "format": format, "all_jobs": all_jobs}
        answer = await self._json("POST", "/v1/webhooks", json=body, retry=False)
        return CreatedWebhook.model_validate(answer)

    async def list_webhooks(self) -> list[Webhook]:
        """Your webhooks (an admin: everyone's), without their secrets."""
        return http.items(await self._json("GET", "/v1/webhooks"), Webhook)

    async def delete_webhook(self, webhook_id: str) -> None:
        """Remove a webhook and its deliveries."""
        await self._json("DELETE", f"/v1/webhooks/{quote(webhook_id, safe='')}")

    async def list_deliveries(
        self, webhook_id: str, job_id: str | None = None, limit: int = 100
    ) -> list[WebhookDelivery]:
        """An endpoint's deliveries, newest first (optionally one job's)."""
        path = f"/v1/webhooks/{quote(webhook_id, safe='')}/deliveries"
        answer = await self._json("GET", path, params=http.params(job_id=job_id, limit=limit))
        return http.items(answer, WebhookDelivery)

    async def redeliver(self, webhook_id: str, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again (same id and body)."""
        path = (
            f"/v1/webhooks/{quote(webhook_id, safe='')}/deliveries/"
            f"{quote(delivery_id, safe='')}/redeliver"
        )
        return WebhookDelivery.model_validate(await self._json("POST", path, retry=False))

    async def request_stacks(self, job_id: str) -> None:
        """Ask a running job's worker to record every rank's Python stack now."""
        await self._json("POST", http.job_path(job_id, "stacks"), retry=False)

    async def get_stacks(self, job_id: str) -> Stacks:
        """The ranks' recorded stacks, newest capture first, with a summary of the latest."""
        return Stacks.model_validate(await self._json("GET", http.job_path(job_id, "stacks")))

    async def search_job_logs(
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
            await self._json("GET", http.job_path(job_id, "logs"), params=query)
        )

    async def search_logs(
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
        return http.items(await self._json("GET", "/v1/logs", params=query), FoundLogLine)

    async def list_audit_records(
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
        return http.items(await self._json("GET", "/v1/audit", params=query), AuditRecord)

    # Plumbing

    async def _json(
        self, method: str, path: str, *, retry: bool | None = None, **kwargs: Any
    ) -> Any:
        response = await self._send(method, path, retry=retry, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @asynccontextmanager
    async def _download_stream(
        self, url: str, headers: dict[str, str]
    ) -> AsyncIterator[tuple[httpx.Response, str | None]]:
        """As `Client._download_stream`: a 307 to the object store is followed, tokenless."""
        async with self._stream("GET", url, headers=headers, ok=(416,)) as response:
            etag = response.headers.get("ETag")
            location = response.headers.get("Location")
            if response.status_code != 307 or not location:
                yield response, etag
                return
        store_headers = {k: v for k, v in headers.items() if k.lower() != "if-range"}
        async with httpx.AsyncClient(timeout=self._http.timeout) as plain:
            async with plain.stream("GET", location, headers=store_headers) as redirected:
                if redirected.is_error and redirected.status_code != 416:
                    await redirected.aread()
                    raise api_error_from_response(redirected)
                yield redirected, etag

    @asynccontextmanager
    async def _stream(
        self, method: str, path: str, *, ok: tuple[int, ...] = (), **kwargs: Any
    ) -> AsyncIterator[httpx.Response]:
        response = await self._send(method, path, stream=True, ok=ok, **kwargs)
        try:
            yield response
        finally:
            await response.aclose()

    async def _send(
        self,
        method: str,
        path: str,
        *,
        retry: bool | None = None,
        stream: bool = False,
        ok: tuple[int, ...] = (),
        **kwargs: Any,
    ) -> httpx.Response:
        if retry is None:
            retry = method in http.IDEMPOTENT_METHODS
        attempt = 0
        while True:
            try:
                request = self._http.build_request(method, path, **kwargs)
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                if not retry or attempt >= self.retries:
                    raise ConnectionFailed(self.api_url, http.describe(exc)) from exc
                await self._backoff(attempt)
                attempt += 1
                continue
            if response.status_code == 503 and retry and attempt < self.retries:
                await response.aclose()
                await self._backoff(attempt, http.retry_after_ms(response))
                attempt += 1
                continue
            if response.is_error and response.status_code not in ok:
                try:
                    await response.aread()
                finally:
                    await response.aclose()
                raise api_error_from_response(response)
            return response

    async def _backoff(self, attempt: int, server_ms: int | None = None) -> None:
        delay = http.backoff_delay(self.backoff_s, attempt, server_ms)
        if delay > 0:
            await asyncio.sleep(delay)


async def _pages(
    fetch: Callable[[int], Awaitable[Any]], after: int, page_size: int
) -> AsyncIterator[Any]:
    while True:
        page = await fetch(after)
        for item in page.items:
            yield item
        next_after = http.next_page_after(page, after, page_size)
        if next_after is None:
            return
        after = next_after
