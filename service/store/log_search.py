"""Log search: the lines of one job, or of an owner's jobs, that contain a string or match a
regular expression, within a time bound.

PostgreSQL: `line LIKE '%q%'` and `line ~ pattern`, served by the pg_trgm GIN index on
`log_line.line` (migration 0009; without the extension the same queries scan), each query
bounded by `SET LOCAL statement_timeout`. SQLite: `instr(line, q)` (SQLite's LIKE ignores
case) and a Python regular expression registered as a function, bounded by a progress handler
that interrupts the query at its deadline.

The patterns are Python's (`re`), checked before any query: at most `MAX_PATTERN_CHARS`, no
backreferences, and no repeat of something that itself repeats or alternates without bound
(`(a+)+`, `(a|aa)*`): the shapes that backtrack exponentially and that no deadline between
rows could stop within one long line; and at most four unbounded repeats (`.*a.*b.*c.*d` is
polynomial in the line's length, which `LAUNCHBAY_MAX_LOG_LINE_BYTES` bounds). PostgreSQL runs
them with its own engine, which agrees with Python's on the common syntax.
"""

import importlib
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import ColumnElement, func, text
from sqlalchemy.exc import DataError, OperationalError
from sqlmodel import Session, col, select

from service.models import Job, LogLine

MAX_PATTERN_CHARS = 256
# Each unbounded repeat multiplies the work on a line that almost matches by its length.
MAX_UNBOUNDED_REPEATS = 4
REGEXP_FUNCTION = "launchbay_regexp"
# SQLite calls the progress handler every this many virtual machine instructions.
PROGRESS_EVERY = 10_000

# The standard library's own pattern parser (re._parser, Python 3.11+).
sre_parse: Any = importlib.import_module("re._parser")
sre_constants: Any = importlib.import_module("re._constants")


class BadPattern(ValueError):
    """The search text or pattern is refused (empty, too long, invalid or too costly)."""


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
        try:
            parsed = sre_parse.parse(text_)
        except re.error as exc:
            raise BadPattern(f"not a valid regular expression: {exc}") from None
        _refuse_costly(parsed, inside_repeat=False)
        if _unbounded_repeats(parsed) > MAX_UNBOUNDED_REPEATS:
            raise BadPattern(
                f"at most {MAX_UNBOUNDED_REPEATS} unbounded repeats (*, +) in a log search pattern"
            )
    return LogQuery(text_, regex)


def _unbounded_repeats(pattern: Any) -> int:
    """How many unbounded repeats the parsed pattern holds, at any depth."""
    count = 0
    for op, arg in pattern:
        if op in _REPEATS or (_POSSESSIVE is not None and op == _POSSESSIVE):
            count += int(arg[1] == _UNBOUNDED) + _unbounded_repeats(arg[2])
        elif op == sre_constants.SUBPATTERN:
            count += _unbounded_repeats(arg[-1])
        elif op == sre_constants.BRANCH:
            count += sum(_unbounded_repeats(b) for b in arg[1])
    return count


_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT}
_POSSESSIVE = getattr(sre_constants, "POSSESSIVE_REPEAT", None)
_UNBOUNDED = sre_constants.MAXREPEAT


def _refuse_costly(pattern: Any, *, inside_repeat: bool) -> None:
    """Walk a parsed pattern; BadPattern on a backreference, or on a repeat (or alternation)
    that can match without bound inside an unbounded repeat."""
    for op, arg in pattern:
        if op in (sre_constants.GROUPREF, sre_constants.GROUPREF_EXISTS):
            raise BadPattern("backreferences are not allowed in a log search")
        if op in _REPEATS or (_POSSESSIVE is not None and op == _POSSESSIVE):
            low, high, body = arg
            if inside_repeat and (high == _UNBOUNDED or high > 100):
                raise BadPattern("nested repeats (such as (a+)+) are not allowed in a log search")
            _refuse_costly(body, inside_repeat=inside_repeat or high == _UNBOUNDED or high > 100)
        elif op == sre_constants.BRANCH:
            if inside_repeat:
                raise BadPattern(
                    "an alternation inside a repeat (such as (a|ab)*) is not allowed in a log "
                    "search; search for each alternative instead"
                )
            for branch in arg[1]:
                _refuse_costly(branch, inside_repeat=inside_repeat)
        elif op == sre_constants.SUBPATTERN:
            _refuse_costly(arg[-1], inside_repeat=inside_repeat)
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            _refuse_costly(arg[1], inside_repeat=inside_repeat)
        elif op == getattr(sre_constants, "ATOMIC_GROUP", None):
            _refuse_costly(arg, inside_repeat=inside_repeat)


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _regexp(pattern: str, line: str | None) -> int:
    return int(line is not None and _compiled(pattern).search(line) is not None)


def escape_like(text_: str) -> str:
    return text_.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def line_matches(session: Session, query: LogQuery) -> ColumnElement[bool]:
    """The condition on `log_line.line` for this database."""
    line = col(LogLine.line)
    postgres = session.get_bind().dialect.name == "postgresql"
    if query.regex:
        if postgres:
            return line.op("~")(query.text)
        return func.launchbay_regexp(query.text, line) == 1
    if postgres:
        return line.like(f"%{escape_like(query.text)}%", escape="\\")
    return func.instr(line, query.text) > 0


@contextmanager
def time_bound(session: Session, timeout_s: float) -> Iterator[None]:
    """Run the statements inside within `timeout_s` (SearchTimeout otherwise); on SQLite,
    with the regular expression function registered on the connection."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
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
        return
    raw: Any = connection.connection.driver_connection
    raw.create_function(REGEXP_FUNCTION, 2, _regexp, deterministic=True)
    deadline = time.monotonic() + timeout_s
    raw.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_EVERY)
    try:
        yield
    except OperationalError as exc:
        if "interrupted" in str(exc.orig):
            raise SearchTimeout(f"the search ran past {timeout_s:g} s") from None
        raise
    finally:
        raw.set_progress_handler(None, 0)


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
