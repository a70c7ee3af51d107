"""A dependency that is away: what an error says about the database or Redis, and the answer
every route gives then, 503 `unavailable` naming the dependency and why:

    {"error": {"code": "unavailable", "message": "the database is locked by another writer;
     try again shortly", "detail": {"dependency": "database", "reason": "locked"}}}

with `Retry-After`. `outage_of` reads an exception (SQLAlchemy's wrapping the driver's error,
or redis-py's); the handlers `install_outage_handlers` adds answer it without a traceback per
request, and without re-raising, so the server keeps the connection. Another database error
is a bug: logged with its traceback and answered 500 `internal_error`, still without a reset.

Reasons: `unreachable` (down, refused, connection lost), `locked` (SQLite's write lock held
longer than `Settings.database_wait_s`), `full`, `read_only`, `io_error`, `busy` (no free
connection in the pool), `overloaded` (PostgreSQL out of memory or connections).
"""

import logging
import sqlite3
from dataclasses import dataclass
from typing import Any

import redis.exceptions
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from service.errors import ServiceUnavailable, error_response

log = logging.getLogger("launchbay.api")

# Seconds a client is asked to wait before it tries again.
RETRY_AFTER_S = 5
# Where a request that met an outage notes it (`request.state`), for the audit log.
OUTAGE_STATE_KEY = "outage"

REASON_TEXT = {
    "unreachable": "does not answer",
    "locked": "is locked by another writer",
    "full": "is full",
    "read_only": "is read-only",
    "io_error": "reports an I/O error",
    "busy": "has no free connection",
    "overloaded": "is out of resources",
}
# SQLite's primary result codes (`sqlite_errorcode & 0xFF`).
SQLITE_REASONS = {
    5: "locked",  # SQLITE_BUSY: "database is locked"
    6: "locked",  # SQLITE_LOCKED
    8: "read_only",  # SQLITE_READONLY
    10: "io_error",  # SQLITE_IOERR
    13: "full",  # SQLITE_FULL: "database or disk is full"
    14: "unreachable",  # SQLITE_CANTOPEN
    15: "locked",  # SQLITE_PROTOCOL: a lock race that SQLite gave up on
}
# PostgreSQL's SQLSTATEs, exact first, then by their class (the first two characters).
PG_REASONS = {
    "25006": "read_only",  # read_only_sql_transaction: a standby, or default_transaction_read_only
    "53100": "full",  # disk_full
    "55P03": "locked",  # lock_not_available
    "57P01": "unreachable",  # admin_shutdown
    "57P02": "unreachable",  # crash_shutdown
    "57P03": "unreachable",  # cannot_connect_now: starting up, in recovery
    "58030": "io_error",
    "08": "unreachable",  # connection exceptions
    "53": "overloaded",  # insufficient resources
}


@dataclass(frozen=True)
class Outage:
    dependency: str  # "database" or "redis"
    reason: str

    @property
    def message(self) -> str:
        name = "Redis" if self.dependency == "redis" else f"the {self.dependency}"
        return f"{name} {REASON_TEXT.get(self.reason, self.reason)}; try again shortly"

    @property
    def detail(self) -> dict[str, str]:
        return {"dependency": self.dependency, "reason": self.reason}


def outage_of(exc: BaseException) -> Outage | None:
    """The outage an exception reports, or None when it reports something else (a bug)."""
    if isinstance(exc, sqlalchemy.exc.TimeoutError):  # the pool's, waiting for a connection
        return Outage("database", "busy")
    if isinstance(exc, sqlalchemy.exc.DBAPIError):
        reason = database_reason(exc)
        return None if reason is None else Outage("database", reason)
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return Outage("redis", "unreachable")
    return None


def database_reason(exc: sqlalchemy.exc.DBAPIError) -> str | None:
    """Why the database failed the statement, when it is away rather than the statement wrong."""
    orig = exc.orig
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        return None if code is None else SQLITE_REASONS.get(code & 0xFF)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate:
        return PG_REASONS.get(sqlstate) or PG_REASONS.get(sqlstate[:2])
    if exc.connection_invalidated:
        return "unreachable"
    # A connection that failed or broke has no SQLSTATE: the server never answered.
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return "unreachable"
    return None


def unavailable_error(outage: Outage) -> ServiceUnavailable:
    """The 503 for `outage`, for a route that catches the error itself."""
    return ServiceUnavailable(
        outage.message, detail=outage.detail, headers={"Retry-After": str(RETRY_AFTER_S)}
    )


def unavailable_response(outage: Outage) -> JSONResponse:
    error = unavailable_error(outage)
    return error_response(error.status, error.code, error.message, error.detail, error.headers)


async def _on_dependency_error(request: Request, exc: Exception) -> JSONResponse:
    outage = outage_of(exc)
    if outage is None:
        log.exception("unhandled error", exc_info=exc)
        return error_response(500, "internal_error", "an unexpected error occurred")
    setattr(request.state, OUTAGE_STATE_KEY, outage)
    log.warning(
        "503 for %s %s: the %s is away (%s; %s: %s)",
        request.method,
        request.url.path,
        outage.dependency,
        outage.reason,
        type(exc).__name__,
        _first_line(exc),
    )
    return unavailable_response(outage)


def _first_line(exc: BaseException) -> str:
    orig: Any = getattr(exc, "orig", None) or exc
    return str(orig).strip().split("\n", 1)[0][:300]


def install_outage_handlers(app: FastAPI) -> None:
    """Answer the database's and Redis's errors from every route (see the module docstring)."""
    for kind in (
        sqlalchemy.exc.DBAPIError,
        sqlalchemy.exc.TimeoutError,
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
    ):
        app.add_exception_handler(kind, _on_dependency_error)
