"""The database engine (one per process, made at start-up) and migrations."""

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from math import ceil
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import NullPool
from sqlmodel import Session, create_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# Above the API's 40 worker threads (anyio's default) and the worker's few threads.
SQLITE_POOL_SIZE = 48
# How long a worker or a command waits for SQLite's write lock, or a PostgreSQL connection:
# their writes are retried, so they can wait. The API waits `Settings.database_wait_s`.
DEFAULT_WAIT_S = 30.0


def make_engine(url: str, *, pooled: bool = True, wait_s: float = DEFAULT_WAIT_S) -> Engine:
    """An engine tuned for the database behind `url`.

    SQLite gets WAL (readers never block the writer) and a busy timeout of `wait_s`, because
    the API and every worker write to the same file from different processes. A PostgreSQL
    connection that takes longer than `wait_s` (at least 2 s, libpq's least) to open fails.

    `pooled=False` (workers) keeps no connection to a database server between sessions: an
    idle worker holds none, so a hundred workers and the API's pool fit under PostgreSQL's
    default `max_connections` (docs/benchmarks.md, "Flat costs"). A worker opens a session a
    few times a second at most, so a connection per session costs it little.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        # A request's session may hold its connection across thread-pool hops; a pool smaller
        # than the thread pool (40) deadlocks under load, so checkouts never wait. The pool
        # keeps as many connections as there are threads: an overflow connection is opened
        # and closed (and tuned, below) for every request under load (py-spy: 14% of it).
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": wait_s},
            pool_size=SQLITE_POOL_SIZE,
            max_overflow=-1,
        )
        event.listen(engine, "connect", partial(_tune_sqlite, busy_ms=int(wait_s * 1000)))
        return engine
    args: dict[str, Any] = {}
    if parsed.get_driver_name() in ("psycopg", "psycopg2"):  # libpq's: whole seconds, 2 at least
        args["connect_timeout"] = max(2, ceil(wait_s))
    if parsed.get_driver_name() == "psycopg":
        # No server-side prepared statements (psycopg prepares a query it ran 5 times on that
        # connection): behind PgBouncer in transaction mode the next transaction may get another
        # server connection, which has no such statement (docs/deployment.md, "PgBouncer").
        args["prepare_threshold"] = None
    if not pooled:
        return create_engine(url, poolclass=NullPool, connect_args=args)
    # More connections than the API's 40 worker threads, for the same reason as above.
    return create_engine(url, pool_pre_ping=True, pool_size=20, max_overflow=40, connect_args=args)


def _tune_sqlite(dbapi_connection: Any, _record: Any, *, busy_ms: int) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A short session; the caller commits what it means to keep."""
    with Session(engine, expire_on_commit=False) as session:
        yield session


def upgrade_database(url: str) -> None:
    """Apply every Alembic migration to `url` (idempotent)."""
    from alembic import command
    from alembic.config import Config

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, "head")
