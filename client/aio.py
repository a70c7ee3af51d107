"""`AsyncClient`: the SDK's surface on `httpx.AsyncClient`, for services that submit many jobs.

    async with AsyncClient() as lb:
        jobs = await asyncio.gather(*(lb.submit_job(spec) for spec in specs))
        async for point in lb.iter_metrics(jobs[0].id):
            ...

Every method of `client.Client` is here under the same name, with the same arguments and
return types; the iterators (`iter_metrics`, `iter_logs`, `stream_events`) are async ones.
The same retry rules and errors apply (see `client.sdk`).
"""

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from client import calls, http
from client.goodput import AsyncGoodputMethods
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
from client.retrying import Download
from client.runs import AsyncRunMethods

JSON = http.JSON


class AsyncClient(AsyncRunMethods, AsyncGoodputMethods):
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
        return await self._call(calls.submit_job(spec, idempotency_key))

    async def dry_run_job(self, spec: JSON) -> dict[str, Any]:
        return await self._call(calls.dry_run_job(spec))

    async def get_job(self, job_id: str) -> Job:
        return await self._call(calls.get_job(job_id))

    async def list_jobs(
        self,
        state: str | None = None,
        limit: int = 50,
        offset: int = 0,
        *,
        name: str | None = None,
        tag: str | None = None,
        owner: str | None = None,
        name_contains: str | None = None,
    ) -> JobPage:
        return await self._call(
            calls.list_jobs(
                state, limit, offset, name=name, tag=tag, owner=owner, name_contains=name_contains
            )
        )

    async def cancel_job(self, job_id: str) -> Job:
        return await self._call(calls.cancel_job(job_id))

    async def delete_job(self, job_id: str) -> None:
        await self._call(calls.delete_job(job_id))

    async def wait_for_job(
        self, job_id: str, timeout: float | None = None, poll_s: float = 1.0
    ) -> Job:
        return await self._wait_for(job_id, timeout, poll_s)

    # What a job produces

    async def list_metrics(
        self,
        job_id: str,
        name: str | None = None,
        after: int = 0,
        limit: int = 1000,
        max_points: int | None = None,
    ) -> MetricPage:
        return await self._call(calls.list_metrics(job_id, name, after, limit, max_points))

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
        return await self._call(calls.list_logs(job_id, rank, after, limit, node, order, before))

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
        return await self._call(calls.list_nodes(job_id))

    async def stream_events(
        self, job_id: str, last_event_id: str | None = None
    ) -> AsyncIterator[Event]:
        """As `Client.stream_events`: resumes with Last-Event-ID, ends with the job."""
        events = self._follow(job_id, last_event_id)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()  # closing this stream closes the connection at once

    async def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        return await self._call(calls.list_checkpoints(job_id))

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
        return await self._download(
            Download(job_id, ref, path, self.retries, self.api_url), progress
        )

    # Code, recipes, workers, service

    async def upload_code(self, path: str | os.PathLike[str]) -> UploadedCode:
        file = Path(path)
        with file.open("rb") as content:
            return await self._call(calls.upload_code(file.name, content))

    async def list_recipes(self) -> list[Recipe]:
        return await self._call(calls.list_recipes())

    async def list_workers(self) -> list[Worker]:
        return await self._call(calls.list_workers())

    async def get_queue(self) -> Queue:
        return await self._call(calls.get_queue())

    async def get_usage(
        self, owner: str | None = None, since: str | datetime | None = None
    ) -> Usage:
        return await self._call(calls.get_usage(owner, since))

    async def get_health(self) -> JSON:
        return await self._call(calls.get_health())

    async def get_readiness(self) -> JSON:
        return await self._call(calls.get_readiness())

    # Tokens (admin only)

    async def create_token(
        self, name: str, role: str = "user", expires_at: str | datetime | None = None
    ) -> CreatedToken:
        return await self._call(calls.create_token(name, role, expires_at))

    async def list_tokens(self) -> list[Token]:
        return await self._call(calls.list_tokens())

    async def revoke_token(self, name: str) -> None:
        await self._call(calls.revoke_token(name))

    # Operations: webhooks, ranks' stacks, log search, the audit log

    async def create_webhook(
        self, url: str, events: list[str], format: str = "json", all_jobs: bool = False
    ) -> CreatedWebhook:
        """Register an endpoint for jobs' events (`state`, `terminal`, `checkpoint`, `best`);
        the secret that signs its deliveries is shown this once."""
        return await self._call(calls.create_webhook(url, events, format, all_jobs))

    async def list_webhooks(self) -> list[Webhook]:
        """Your webhooks (an admin: everyone's), without their secrets."""
        return await self._call(calls.list_webhooks())

    async def delete_webhook(self, webhook_id: str) -> None:
        """Remove a webhook and its deliveries."""
        await self._call(calls.delete_webhook(webhook_id))

    async def list_deliveries(
        self, webhook_id: str, job_id: str | None = None, limit: int = 100
    ) -> list[WebhookDelivery]:
        """An endpoint's deliveries, newest first (optionally one job's)."""
        return await self._call(calls.list_deliveries(webhook_id, job_id, limit))

    async def redeliver(self, webhook_id: str, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again (same id and body)."""
        return await self._call(calls.redeliver(webhook_id, delivery_id))

    async def request_stacks(self, job_id: str) -> None:
        """Ask a running job's worker to record every rank's Python stack now."""
        await self._call(calls.request_stacks(job_id))

    async def get_stacks(self, job_id: str) -> Stacks:
        """The ranks' recorded stacks, newest capture first, with a summary of the latest."""
        return await self._call(calls.get_stacks(job_id))

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
        return await self._call(calls.search_job_logs(job_id, q, regex, rank, after, limit))

    async def search_logs(
        self,
        q: str,
        regex: bool = False,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        limit: int = 100,
    ) -> list[FoundLogLine]:
        """Lines of the caller's jobs (an admin: every job) that match, newest first."""
        return await self._call(calls.search_logs(q, regex, since, until, limit))

    async def list_audit_records(
        self,
        owner: str | None = None,
        kind: str | None = None,
        since: str | datetime | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Admin only: state-changing requests, newest first."""
        return await self._call(calls.list_audit_records(owner, kind, since, limit))


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
