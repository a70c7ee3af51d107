"""Log search: the lines of one job, or of an owner's jobs, that contain a string or match a
regular expression, within a time bound, and without holding up other requests whatever the
pattern.

PostgreSQL: `line LIKE '%q%'` and `line ~ pattern`, served by the pg_trgm GIN index on
`log_line.line` (migration 0009; without the extension the same queries scan), each query
bounded by `SET LOCAL statement_timeout`; the database matches, outside this process. SQLite:
`instr(line, q)` (SQLite's LIKE ignores case) and RE2 registered as a function; the query is
interrupted at its deadline by a progress handler, and by the function before each line.

A pattern is checked and compiled by `jobs.user_regex`, the rule every user regex follows:
RE2 syntax, matched in time linear in the line (which `LAUNCHBAY_MAX_LOG_LINE_BYTES` bounds)
with the GIL released, so no line holds a search past its deadline by more than its own match,
and none freezes the process. PostgreSQL runs the pattern with its own engine, which agrees
with RE2 on the common syntax and is stopped by the statement timeout.
"""

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, LargeBinary, cast, func, text
from sqlalchemy.exc import DataError, OperationalError
from sqlmodel import Session, col, select

from jobs.user_regex import MAX_PATTERN_CHARS, BadPattern, compile_user_regex
from service.models import Job, LogLine

REGEXP_FUNCTION = "launchbay_regexp"
# SQLite calls the progress handler every this many virtual machine instructions.
PROGRESS_EVERY = 10_000


class SearchTimeout(Exception):
    """The search ran past its time limit."""


@dataclass(frozen=True)
class LogQuery:
    text: str
    regex: bool = False


def check_query(text_: str, regex: bool) -> LogQuery:
    """The query, checked (BadPattern otherwise)."""
    if not text_:
        raise BadPattern("the search text is empty")
    if len(text_) > MAX_PATTERN_CHARS:
        raise BadPattern(f"the search text is longer than {MAX_PATTERN_CHARS} characters")
    if "\x00" in text_:
        raise BadPattern("the search text holds a NUL character")
    if regex:
        compile_user_regex(text_)
    return LogQuery(text_, regex)


def _regexp(pattern: str, line: bytes | None) -> int:
    return int(line is not None and compile_user_regex(pattern).found_in(line))


def escape_like(text_: str) -> str:
    return text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def line_matches(session: Session, query: LogQuery) -> ColumnElement[bool]:
    """The condition on `log_line.line` for this database."""
    line = col(LogLine.line)
    postgres = session.get_bind().dialect.name == "postgresql"
    if query.regex:
        if postgres:
            return line.op("~")(query.text)
        # The line's UTF-8 bytes as stored: RE2 reads them without a str in between.
        return func.launchbay_regexp(query.text, cast(line, LargeBinary)) == 1
    if postgres:
        return line.like(f"%{escape_like(query.text)}%", escape="\\")
    return func.instr(line, query.text) > 0


@contextmanager
def time_bound(session: Session, timeout_s: float) -> Iterator[None]:
    """Run the statements inside within `timeout_s` (SearchTimeout otherwise); on SQLite,
    with the regular expression function registered on the connection."""
    connection = session.connection()
    if connection.dialect.name != "postgresql":
        with _sqlite_bound(connection.connection.driver_connection, timeout_s):
            yield
        return
    connection.execute(text(f"SET LOCAL statement_timeout = {max(1, int(timeout_s * 1000))}"))
    try:
        yield
    except (OperationalError, DataError) as exc:
        session.rollback()
        # The regex engine reports the timeout as "invalid regular expression: operation
        # cancelled"; the executor as "canceling statement due to statement timeout".
        if "cancel" in str(exc.orig):
            raise SearchTimeout(f"the search ran past {timeout_s:g} s") from None
        if isinstance(exc, DataError):
            raise BadPattern(f"the database refused the pattern: {exc.orig}") from None
        raise


@contextmanager
def _sqlite_bound(raw: Any, timeout_s: float) -> Iterator[None]:
    """SQLite's side of `time_bound`: the query is interrupted at the deadline, checked every
    PROGRESS_EVERY instructions and before each line's match, the long step on long lines."""
    deadline = time.monotonic() + timeout_s

    def past_deadline() -> int:
        return int(time.monotonic() > deadline)

    def regexp(pattern: str, line: bytes | None) -> int:
        if past_deadline():
            raw.interrupt()
            return 0
        return _regexp(pattern, line)

    raw.create_function(REGEXP_FUNCTION, 2, regexp, deterministic=True)
    raw.set_progress_handler(past_deadline, PROGRESS_EVERY)
    try:
        yield
    except OperationalError as exc:
        if "interrupted" in str(exc.orig):
            raise SearchTimeout(f"the search ran past {timeout_s:g} s") from None
        raise
    finally:
        raw.set_progress_handler(None, 0)
        # The closure holds the connection: registered on it, it would keep it alive forever.
        raw.create_function(REGEXP_FUNCTION, 2, _regexp, deterministic=True)


def search_job_logs(
    session: Session,
    job_id: str,
    query: LogQuery,
    *,
    rank: int | None,
    node: int | None,
    after: int,
    limit: int,
    timeout_s: float,
) -> list[LogLine]:
    """A job's matching lines after seq `after`, in seq order."""
    stmt = select(LogLine).where(
        LogLine.job_id == job_id, col(LogLine.seq) > after, line_matches(session, query)
    )
    if rank is not None:
        stmt = stmt.where(LogLine.rank == rank)
    if node is not None:
        stmt = stmt.where(LogLine.node == node)
    with time_bound(session, timeout_s):
        return list(session.exec(stmt.order_by(col(LogLine.seq)).limit(limit)).all())


def search_owner_logs(
    session: Session,
    owner: str | None,
    query: LogQuery,
    *,
    since: float | None,
    before: float | None,
    limit: int,
    timeout_s: float,
) -> list[LogLine]:
    """Matching lines of `owner`'s jobs (every job's for None), newest first, written at or
    after `since` and before `before` (Unix seconds)."""
    stmt = select(LogLine).where(line_matches(session, query))
    if owner is not None:
        owned = select(Job.id).where(Job.owner == owner)
        stmt = stmt.where(col(LogLine.job_id).in_(owned))
    if since is not None:
        stmt = stmt.where(col(LogLine.ts) >= since)
    if before is not None:
        stmt = stmt.where(col(LogLine.ts) < before)
    stmt = stmt.order_by(col(LogLine.ts).desc(), col(LogLine.id).desc()).limit(limit)
    with time_bound(session, timeout_s):
        return list(session.exec(stmt).all())
