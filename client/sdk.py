"""The Python SDK for the Launchbay HTTP API (v1): `Client` (and `client.aio.AsyncClient`).

    with Client() as lb:                       # LAUNCHBAY_API_URL, LAUNCHBAY_TOKEN
        job = lb.submit_job({"name": "demo", "recipe": "synthetic"})
        for event in lb.stream_events(job.id): # reconnects by itself, ends with the job
            print(event.event, event.data)
        lb.download_checkpoint(job.id, "best", "model.pt")
        # `launchbay run -- python train.py --epochs 3` from this directory, then its files:
        job = lb.run_program(["python", "train.py", "--epochs", "3"], nproc_per_node=2)
        lb.wait_for_job(job.id)
        lb.download_artifacts(job.id, dest="results")

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
from collections.abc import Callable, Generator, Iterator
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from client import calls, http
from client.goodput import GoodputMethods
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
from client.runs import RunMethods
from client.unpack import unpack_if_directory

JSON = http.JSON
ProgressCallback = http.ProgressCallback


class Client(RunMethods, GoodputMethods):
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
        return self._call(calls.submit_job(spec, idempotency_key))

    def dry_run_job(self, spec: JSON) -> dict[str, Any]:
        """What submitting `spec` would launch, nothing stored or started: the executor
        (`rq` or `slurm`), its tasks, and for a Slurm queue the `sbatch_script`."""
        return self._call(calls.dry_run_job(spec))

    def get_job(self, job_id: str) -> Job:
        """The job as it is now (NotFound for an unknown id, or another owner's job).

        Wherever a method takes a `job_id`, it may be the whole id, a unique prefix of it (4
        characters or more), the job's name, or `name@N` (the Nth newest job of that name,
        `@1` the newest): the API resolves it. A ref that names several jobs raises
        Conflict (`code` `ambiguous_id`, the candidates in `detail["candidates"]`)."""
        return self._call(calls.get_job(job_id))

    def list_jobs(
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
        """One page of jobs, newest first. `name` is an exact name, `name_contains` a part of
        one (any case); `tag` is `key=value`; `owner` needs an admin token."""
        return self._call(
            calls.list_jobs(
                state, limit, offset, name=name, tag=tag, owner=owner, name_contains=name_contains
            )
        )

    def cancel_job(self, job_id: str) -> Job:
        """Ask a job to stop: a queued one is `cancelled` at once, a running one `cancelling`."""
        return self._call(calls.cancel_job(job_id))

    def delete_job(self, job_id: str) -> None:
        """Delete a finished job and its files (409 while it is not terminal)."""
        self._call(calls.delete_job(job_id))

    def wait_for_job(self, job_id: str, timeout: float | None = None, poll_s: float = 1.0) -> Job:
        """Poll until the job is `succeeded`, `failed` or `cancelled`, and return it.

        Raises WaitTimeout (also a TimeoutError) after `timeout` seconds."""
        return self._wait_for(job_id, timeout, poll_s)

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
        return self._call(calls.list_metrics(job_id, name, after, limit, max_points))

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
        return self._call(calls.list_logs(job_id, rank, after, limit, node, order, before))

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
        return self._call(calls.list_nodes(job_id))

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
        yield from self._follow(job_id, last_event_id)

    def list_checkpoints(self, job_id: str) -> list[Checkpoint]:
        """The job's registered checkpoints, oldest first."""
        return self._call(calls.list_checkpoints(job_id))

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
        download = Download(job_id, ref, path, self.retries, self.api_url)
        saved = self._download(download, progress)
        if unpack and download.is_tar:
            return unpack_if_directory(saved, download.etag, self.list_checkpoints(job_id))
        return saved

    # Code, recipes, workers, service

    def upload_code(self, path: str | os.PathLike[str]) -> UploadedCode:
        """Upload a `.py`, `.zip` or `.tar.gz`; use its `code_id` in a spec's `code`."""
        file = Path(path)
        with file.open("rb") as content:
            return self._call(calls.upload_code(file.name, content))

    def list_recipes(self) -> list[Recipe]:
        """The built-in training programs, each with its config's JSON Schema."""
        return self._call(calls.list_recipes())

    def list_workers(self) -> list[Worker]:
        """The workers seen: queues, devices, last heartbeat, current job."""
        return self._call(calls.list_workers())

    def get_queue(self) -> Queue:
        """What waits, in the order it will run, with why each job waits."""
        return self._call(calls.get_queue())

    def get_usage(self, owner: str | None = None, since: str | datetime | None = None) -> Usage:
        """Device-seconds per owner since `since` (default: one quota period ago); a user
        sees only their own."""
        return self._call(calls.get_usage(owner, since))

    def get_health(self) -> JSON:
        """`{"status": "ok"}` while the API process lives."""
        return self._call(calls.get_health())

    def get_readiness(self) -> JSON:
        """`{...}` when the database and Redis answer; ServiceUnavailable names what does not."""
        return self._call(calls.get_readiness())

    # Tokens (admin only)

    def create_token(
        self, name: str, role: str = "user", expires_at: str | datetime | None = None
    ) -> CreatedToken:
        """Make a token; its secret (`token`) is shown this once."""
        return self._call(calls.create_token(name, role, expires_at))

    def list_tokens(self) -> list[Token]:
        """Every token (never the secrets)."""
        return self._call(calls.list_tokens())

    def revoke_token(self, name: str) -> None:
        """Revoke a token by name; requests carrying it are refused from now on."""
        self._call(calls.revoke_token(name))

    # Operations: webhooks, ranks' stacks, log search, the audit log

    def create_webhook(
        self, url: str, events: list[str], format: str = "json", all_jobs: bool = False
    ) -> CreatedWebhook:
        """Register an endpoint for jobs' events (`state`, `terminal`, `checkpoint`, `best`);
        the secret that signs its deliveries is shown this once."""
        return self._call(calls.create_webhook(url, events, format, all_jobs))

    def list_webhooks(self) -> list[Webhook]:
        """Your webhooks (an admin: everyone's), without their secrets."""
        return self._call(calls.list_webhooks())

    def delete_webhook(self, webhook_id: str) -> None:
        """Remove a webhook and its deliveries."""
        self._call(calls.delete_webhook(webhook_id))

    def list_deliveries(
        self, webhook_id: str, job_id: str | None = None, limit: int = 100
    ) -> list[WebhookDelivery]:
        """An endpoint's deliveries, newest first (optionally one job's)."""
        return self._call(calls.list_deliveries(webhook_id, job_id, limit))

    def redeliver(self, webhook_id: str, delivery_id: str) -> WebhookDelivery:
        """Send a delivery again (same id and body)."""
        return self._call(calls.redeliver(webhook_id, delivery_id))

    def request_stacks(self, job_id: str) -> None:
        """Ask a running job's worker to record every rank's Python stack now."""
        self._call(calls.request_stacks(job_id))

    def get_stacks(self, job_id: str) -> Stacks:
        """The ranks' recorded stacks, newest capture first, with a summary of the latest."""
        return self._call(calls.get_stacks(job_id))

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
        return self._call(calls.search_job_logs(job_id, q, regex, rank, after, limit))

    def search_logs(
        self,
        q: str,
        regex: bool = False,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        limit: int = 100,
    ) -> list[FoundLogLine]:
        """Lines of the caller's jobs (an admin: every job) that match, newest first."""
        return self._call(calls.search_logs(q, regex, since, until, limit))

    def list_audit_records(
        self,
        owner: str | None = None,
        kind: str | None = None,
        since: str | datetime | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Admin only: state-changing requests, newest first."""
        return self._call(calls.list_audit_records(owner, kind, since, limit))


def _pages(fetch: Callable[[int], Any], after: int, page_size: int) -> Iterator[Any]:
    while True:
        page = fetch(after)
        yield from page.items
        next_after = http.next_page_after(page, after, page_size)
        if next_after is None:
            return
        after = next_after
