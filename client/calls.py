"""Every call of the API, written once: the request it sends and how its answer reads.

`Client` and `AsyncClient` describe each of their methods by a `Call` made here and send it
in their own way (`client.transport`), so a route's path, query, body, retry rule and record
live in one place for both clients.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, BinaryIO, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from client import http, models
from client.goodput_models import Goodput, JobGoodput

JSON = http.JSON
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Call(Generic[R]):
    """One request, and `read`, which makes the method's return value of the answer's JSON
    body (None when it has none, as a 204)."""

    method: str
    path: str
    read: Callable[[Any], R]
    # None: retried when the method is idempotent (`http.IDEMPOTENT_METHODS`).
    retry: bool | None = None
    params: JSON | None = None
    json: Any = None
    headers: dict[str, str] | None = None
    files: dict[str, tuple[str, BinaryIO, str]] | None = None

    def options(self) -> dict[str, Any]:
        """The request's keyword arguments for httpx."""
        given = {
            "params": self.params,
            "json": self.json,
            "headers": self.headers,
            "files": self.files,
        }
        return {key: value for key, value in given.items() if value is not None}


def _nothing(body: Any) -> None:
    return None


def streamed(path: str, headers: dict[str, str]) -> Call[None]:
    """A GET whose answer is read as it comes (an event stream, a download)."""
    return Call("GET", path, _nothing, headers=headers)


def _dict(body: Any) -> dict[str, Any]:
    assert isinstance(body, dict)
    return dict(body)


def _items(model: type[M]) -> Callable[[Any], list[M]]:
    return lambda body: http.items(body, model)


def _iso(moment: str | datetime | None) -> str | None:
    return moment.isoformat() if isinstance(moment, datetime) else moment


def _webhook_path(webhook_id: str, *rest: str) -> str:
    return "/".join(["/v1/webhooks", *(quote(part, safe="") for part in (webhook_id, *rest))])


# Jobs


def submit_job(spec: JSON, idempotency_key: str | None) -> Call[models.Job]:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    retry = idempotency_key is not None
    return Call("POST", "/v1/jobs", models.Job.model_validate, retry, json=spec, headers=headers)


def dry_run_job(spec: JSON) -> Call[dict[str, Any]]:
    return Call("POST", "/v1/dry-run", _dict, retry=True, json=spec)


def get_job(job_id: str) -> Call[models.Job]:
    return Call("GET", http.job_path(job_id), models.Job.model_validate)


def list_jobs(
    state: str | None, limit: int, offset: int, **filters: str | None
) -> Call[models.JobPage]:
    """`filters`: `name`, `tag` (`key=value`), `owner`; None ones are left out."""
    query = http.params(state=state, limit=limit, offset=offset, **filters)
    return Call("GET", "/v1/jobs", models.JobPage.model_validate, params=query)


def list_runs(limit: int, offset: int, **filters: str | None) -> Call[models.RunPage]:
    """`filters`: `state`, `name`, `name_contains`, `tag` (`key=value`), `owner`."""
    query = http.params(limit=limit, offset=offset, **filters)
    return Call("GET", "/v1/runs", models.RunPage.model_validate, params=query)


def cancel_job(job_id: str) -> Call[models.Job]:
    return Call("POST", http.job_path(job_id, "cancel"), models.Job.model_validate, retry=False)


def delete_job(job_id: str) -> Call[None]:
    return Call("DELETE", http.job_path(job_id), _nothing)


# What a job produces


def list_metrics(
    job_id: str, name: str | None, after: int, limit: int, max_points: int | None
) -> Call[models.MetricPage]:
    query = http.params(name=name, after=after, limit=limit, max_points=max_points)
    return Call(
        "GET", http.job_path(job_id, "metrics"), models.MetricPage.model_validate, params=query
    )


def list_logs(
    job_id: str,
    rank: int | None,
    after: int,
    limit: int,
    node: int | None,
    order: str | None,
    before: int | None,
) -> Call[models.LogPage]:
    query = http.params(rank=rank, node=node, after=after, limit=limit, order=order, before=before)
    return Call("GET", http.job_path(job_id, "logs"), models.LogPage.model_validate, params=query)


def list_nodes(job_id: str) -> Call[list[models.Node]]:
    return Call("GET", http.job_path(job_id, "nodes"), _items(models.Node))


def list_checkpoints(job_id: str) -> Call[list[models.Checkpoint]]:
    return Call("GET", http.job_path(job_id, "checkpoints"), _items(models.Checkpoint))


# Code, recipes, workers, service


def upload_code(filename: str, content: BinaryIO) -> Call[models.UploadedCode]:
    files = {"file": (filename, content, "application/octet-stream")}
    return Call("POST", "/v1/code", models.UploadedCode.model_validate, retry=False, files=files)


def get_code(code_id: str) -> Call[models.UploadedCode]:
    return Call("GET", f"/v1/code/{quote(code_id, safe='')}", models.UploadedCode.model_validate)


def list_code() -> Call[list[models.CodeUpload]]:
    return Call("GET", "/v1/code", _items(models.CodeUpload))


def delete_code(code_id: str) -> Call[None]:
    return Call("DELETE", f"/v1/code/{quote(code_id, safe='')}", _nothing)


def get_limits() -> Call[models.Limits]:
    return Call("GET", "/v1/limits", models.Limits.model_validate)


def list_artifacts(job_id: str) -> Call[models.ArtifactPage]:
    return Call("GET", http.job_path(job_id, "artifacts"), models.ArtifactPage.model_validate)


def artifact_download(job_id: str, path: str) -> Call[None]:
    """An artifact's bytes, read as they come; `path` is sent as one escaped segment."""
    return streamed(http.job_path(job_id, "artifacts", path), {"Accept": "*/*"})


def list_recipes() -> Call[list[models.Recipe]]:
    return Call("GET", "/v1/recipes", _items(models.Recipe))


def list_workers() -> Call[list[models.Worker]]:
    return Call("GET", "/v1/workers", _items(models.Worker))


def get_queue() -> Call[models.Queue]:
    return Call("GET", "/v1/queue", models.Queue.model_validate)


def get_job_goodput(job_id: str) -> Call[JobGoodput]:
    return Call("GET", http.job_path(job_id, "goodput"), JobGoodput.model_validate)


def get_goodput(
    owner: str | None,
    queue: str | None,
    since: str | datetime | None,
    until: str | datetime | None,
) -> Call[Goodput]:
    def text(moment: str | datetime | None) -> str | None:
        return moment.isoformat() if isinstance(moment, datetime) else moment

    query = http.params(owner=owner, queue=queue, since=text(since), until=text(until))
    return Call("GET", "/v1/goodput", Goodput.model_validate, params=query)


def get_usage(owner: str | None, since: str | datetime | None) -> Call[models.Usage]:
    query: JSON = http.usage_params(owner, since)
    return Call("GET", "/v1/usage", models.Usage.model_validate, params=query)


def get_health() -> Call[JSON]:
    return Call("GET", "/v1/health", _dict)


def get_readiness() -> Call[JSON]:
    return Call("GET", "/v1/ready", _dict, retry=False)


# Tokens


def create_token(
    name: str, role: str, expires_at: str | datetime | None
) -> Call[models.CreatedToken]:
    body = http.token_body(name, role, expires_at)
    return Call("POST", "/v1/tokens", models.CreatedToken.model_validate, retry=False, json=body)


def list_tokens() -> Call[list[models.Token]]:
    return Call("GET", "/v1/tokens", _items(models.Token))


def revoke_token(name: str) -> Call[None]:
    return Call("DELETE", http.token_path(name), _nothing)


# Operations: webhooks, ranks' stacks, log search, the audit log


def create_webhook(
    url: str, events: list[str], format: str, all_jobs: bool
) -> Call[models.CreatedWebhook]:
    body = {"url": url, "events": events, "format": format, "all_jobs": all_jobs}
    return Call(
        "POST", "/v1/webhooks", models.CreatedWebhook.model_validate, retry=False, json=body
    )


def list_webhooks() -> Call[list[models.Webhook]]:
    return Call("GET", "/v1/webhooks", _items(models.Webhook))


def delete_webhook(webhook_id: str) -> Call[None]:
    return Call("DELETE", _webhook_path(webhook_id), _nothing)


def list_deliveries(
    webhook_id: str, job_id: str | None, limit: int
) -> Call[list[models.WebhookDelivery]]:
    path = _webhook_path(webhook_id, "deliveries")
    query = http.params(job_id=job_id, limit=limit)
    return Call("GET", path, _items(models.WebhookDelivery), params=query)


def redeliver(webhook_id: str, delivery_id: str) -> Call[models.WebhookDelivery]:
    path = _webhook_path(webhook_id, "deliveries", delivery_id, "redeliver")
    return Call("POST", path, models.WebhookDelivery.model_validate, retry=False)


def request_stacks(job_id: str) -> Call[None]:
    return Call("POST", http.job_path(job_id, "stacks"), _nothing, retry=False)


def get_stacks(job_id: str) -> Call[models.Stacks]:
    return Call("GET", http.job_path(job_id, "stacks"), models.Stacks.model_validate)


def search_job_logs(
    job_id: str, q: str, regex: bool, rank: int | None, after: int, limit: int
) -> Call[models.LogPage]:
    query = http.params(q=q, regex="true" if regex else None, rank=rank, after=after)
    query["limit"] = limit
    return Call("GET", http.job_path(job_id, "logs"), models.LogPage.model_validate, params=query)


def search_logs(
    q: str,
    regex: bool,
    since: str | datetime | None,
    until: str | datetime | None,
    limit: int,
) -> Call[list[models.FoundLogLine]]:
    regex_flag = "true" if regex else None
    query = http.params(q=q, regex=regex_flag, since=_iso(since), until=_iso(until), limit=limit)
    return Call("GET", "/v1/logs", _items(models.FoundLogLine), params=query)


def list_audit_records(
    owner: str | None, kind: str | None, since: str | datetime | None, limit: int
) -> Call[list[models.AuditRecord]]:
    query = http.params(owner=owner, kind=kind, since=_iso(since), limit=limit)
    return Call("GET", "/v1/audit", _items(models.AuditRecord), params=query)
