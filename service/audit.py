"""The audit log: one record per state-changing request (POST, PUT, PATCH, DELETE under /v1),
answered or refused, written by the outermost middleware once the final status is known.

A record holds who (the authenticated caller, None when the request was not), when, from where
(the peer address), what (a `kind` such as `job.submit`, the method, path and the target named
in the path) and the outcome (the status; `ok`, `refused` for a 4xx, `error` for a 5xx). It is
written before the answer leaves, so a client that got its answer finds the record. Records
older than `LAUNCHBAY_AUDIT_RETENTION_DAYS` are purged by the writer, at most once an hour.

A record the database does not take is logged instead, and the answer stands: the audit log
never turns a request into an error. When the request itself was answered 503 because the
database is away (`service.outages`), the record goes to the log at once, rather than make
the client wait for the database a second time.
"""

import logging
import threading
import time
from datetime import timedelta
from typing import Any

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import delete, insert
from sqlalchemy.engine import Engine
from sqlmodel import col
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.models import AuditRecord, utcnow
from service.outages import OUTAGE_STATE_KEY, Outage

log = logging.getLogger("launchbay.audit")

AUDITED_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PRINCIPAL_STATE_KEY = "audit_principal"
MAX_PATH_CHARS = 1024
PURGE_EVERY_S = 3600.0
# The kinds of the routes whose names people search for; any other route gets
# `<resource>.<action>` from its path template (see `audit_kind`).
KINDS = {
    ("POST", "/v1/jobs"): "job.submit",
    ("POST", "/v1/jobs/{job_id}/cancel"): "job.cancel",
    ("DELETE", "/v1/jobs/{job_id}"): "job.delete",
    ("POST", "/v1/jobs/{job_id}/stacks"): "job.stacks",
    ("POST", "/v1/tokens"): "token.create",
    ("DELETE", "/v1/tokens/{name}"): "token.revoke",
    ("POST", "/v1/webhooks"): "webhook.create",
    ("DELETE", "/v1/webhooks/{webhook_id}"): "webhook.delete",
    ("POST", "/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"): "webhook.redeliver",
    ("POST", "/v1/code"): "code.upload",
    ("DELETE", "/v1/code/{code_id}"): "code.delete",
}
_GENERIC_ACTIONS = {"POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete"}


def audit_kind(method: str, template: str | None) -> str:
    """What a request does, by its route: `KINDS`, else `<resource>.<action>` where the action
    is the template's last literal segment after a parameter, or the method's (create,
    update, delete). `unknown` when no route matched."""
    if template is None:
        return "unknown"
    known = KINDS.get((method, template))
    if known is not None:
        return known
    parts = [p for p in template.split("/") if p and p != "v1"]
    resource = parts[0].rstrip("s") if parts else "root"
    last = parts[-1] if parts else ""
    if len(parts) > 1 and not last.startswith("{"):
        return f"{resource}.{last}"[:64]
    return f"{resource}.{_GENERIC_ACTIONS.get(method, method.lower())}"[:64]


def outcome_of(status: int) -> str:
    return "ok" if status < 400 else "refused" if status < 500 else "error"


class AuditWriter:
    """Inserts records, and purges the old ones now and then (see the module docstring)."""

    def __init__(self, retention_days: float) -> None:
        self.retention = timedelta(days=retention_days)
        self._next_purge = 0.0
        self._lock = threading.Lock()

    def write(self, engine: Engine, record: dict[str, Any]) -> None:
        with engine.begin() as connection:
            connection.execute(insert(AuditRecord.__table__), [record])  # type: ignore[attr-defined]
        self._maybe_purge(engine)

    def _maybe_purge(self, engine: Engine) -> None:
        with self._lock:
            if time.monotonic() < self._next_purge:
                return
            self._next_purge = time.monotonic() + PURGE_EVERY_S
        cutoff = utcnow() - self.retention
        with engine.begin() as connection:
            gone = connection.execute(delete(AuditRecord).where(col(AuditRecord.ts) < cutoff))
        if gone.rowcount:
            log.info("purged %d audit records older than %s", gone.rowcount, cutoff)


class AuditLog:
    """ASGI middleware: records every state-changing request with its final status."""

    def __init__(self, app: ASGIApp, writer: AuditWriter) -> None:
        self.app = app
        self.writer = writer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "")
        if (
            scope["type"] != "http"
            or method not in AUDITED_METHODS
            or not scope.get("path", "").startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        written = False

        async def audited_send(message: Message) -> None:
            nonlocal written
            if message["type"] == "http.response.start" and not written:
                written = True
                await self._record(scope, int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, audited_send)
        except Exception:
            if not written:
                written = True
                await self._record(scope, 500)
            raise

    async def _record(self, scope: Scope, status: int) -> None:
        record = audit_record(scope, status)
        engine: Engine | None = getattr(scope["app"].state, "engine", None)
        if engine is None:
            return
        outage: Outage | None = scope.get("state", {}).get(OUTAGE_STATE_KEY)
        if outage is not None and outage.dependency == "database":
            log.warning("audit record not written (the database %s): %s", outage.reason, record)
            return
        try:
            await run_in_threadpool(self.writer.write, engine, record)
        except Exception:
            # The request's answer stands; the missing record is logged loudly.
            log.exception("cannot write the audit record %s", record)


def audit_record(scope: Scope, status: int) -> dict[str, Any]:
    route = scope.get("route")
    template: str | None = getattr(route, "path", None)
    method = scope["method"]
    principal = scope.get("state", {}).get(PRINCIPAL_STATE_KEY)
    params = scope.get("path_params") or {}
    target = ",".join(str(v) for v in params.values())[:256] or None
    client = scope.get("client")
    return {
        "ts": utcnow(),
        "owner": getattr(principal, "name", None),
        "kind": audit_kind(method, template),
        "method": method,
        "path": scope.get("path", "")[:MAX_PATH_CHARS],
        "target": target,
        "client": client[0][:64] if client else None,
        "status": status,
        "outcome": outcome_of(status),
    }
