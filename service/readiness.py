"""Whether the database takes writes, and whether Redis answers: for `GET /v1/ready` and for
the reaper.

A read proves little: a SQLite that is locked, full or read-only, or a PostgreSQL standby,
still answers `SELECT 1`. So the check writes: one UPDATE of the one row of `write_check`,
committed. It waits for the database as a request does (`Settings.database_wait_s`), so a
locked SQLite reads `locked` after that long. Readiness is polled, often by several
balancers at once: `CachedDatabaseCheck` makes the write at most once per `WRITE_CHECK_EVERY_S` in a
process and shares its answer meanwhile, also with the callers that arrive while it runs.
"""

import threading
import time

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy import insert, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from service.models import WriteCheck, utcnow
from service.outages import outage_of

WRITE_CHECK_EVERY_S = 1.0
WRITE_CHECK_TABLE = WriteCheck.__table__  # type: ignore[attr-defined]


def write_to_database(engine: Engine) -> None:
    """One small committed write; raises the database's error when it does not take it."""
    now = utcnow()
    with engine.begin() as connection:
        written = connection.execute(
            update(WRITE_CHECK_TABLE)
            .where(WRITE_CHECK_TABLE.c.id == 1)
            .values(written_at=now, writes=WRITE_CHECK_TABLE.c.writes + 1)
        )
        if written.rowcount == 0:  # someone deleted the row the migration made
            connection.execute(insert(WRITE_CHECK_TABLE).values(id=1, written_at=now, writes=1))


def describe_failure(exc: BaseException) -> str:
    """`error: <reason>` for a readiness check's detail (`service.outages`)."""
    outage = outage_of(exc)
    return f"error: {outage.reason if outage else type(exc).__name__}"


def check_database(engine: Engine) -> str:
    """`ok`, or `error: <reason>` (`locked`, `full`, `read_only`, `unreachable`...)."""
    try:
        write_to_database(engine)
    except SQLAlchemyError as exc:
        return describe_failure(exc)
    return "ok"


def check_redis(redis: Redis) -> str:
    try:
        redis.ping()
    except RedisError as exc:
        return describe_failure(exc)
    return "ok"


class CachedDatabaseCheck:
    """`check_database`, made at most once per `every_s` (see the module docstring)."""

    def __init__(self, every_s: float = WRITE_CHECK_EVERY_S) -> None:
        self.every_s = every_s
        self._lock = threading.Lock()
        self._checked_at = -float("inf")
        self._answer = "ok"

    def __call__(self, engine: Engine) -> str:
        with self._lock:
            if time.monotonic() - self._checked_at >= self.every_s:
                self._answer = check_database(engine)
                self._checked_at = time.monotonic()
            return self._answer
