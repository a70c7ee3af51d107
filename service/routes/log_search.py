"""Log search across jobs (`GET /v1/logs?q=`), and the query parameters that
`GET /v1/jobs/{id}/logs` shares with it (`q`, `regex`). The queries: `service.records.log_search`.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, TypeVar

from fastapi import APIRouter, Query
from pydantic import BaseModel

from jobs.user_regex import MAX_PATTERN_CHARS, BadPattern
from service.deps import CurrentPrincipal, SessionDep, SettingsDep
from service.errors import Forbidden, Unprocessable
from service.models import LogLine
from service.records.log_search import (
    LogQuery,
    SearchTimeout,
    check_query,
    search_job_logs,
    search_owner_logs,
)

router = APIRouter(prefix="/v1/logs", tags=["logs"])
T = TypeVar("T")

SearchText = Annotated[
    str | None,
    Query(
        max_length=MAX_PATTERN_CHARS,
        description="only lines that contain this text (case-sensitive), or match it with regex",
    ),
]
# `regex=true` makes `q` a regular expression; a `regex` that is not a yes/no word is taken as
# the pattern itself (`?regex=loss=nan`), for callers that give it that way.
RegexOption = Annotated[
    str | None, Query(max_length=MAX_PATTERN_CHARS, description="true: q is a regular expression")
]
_YES = {"true", "1", "yes", "on"}
_NO = {"false", "0", "no", "off", ""}


def log_query(q: str | None, regex: str | None) -> LogQuery | None:
    """The search the parameters ask for (None: no search); 422 for a refused one."""
    text = q
    as_regex = False
    if regex is not None:
        word = regex.strip().lower()
        if word in _YES:
            as_regex = True
        elif word not in _NO:
            if q is not None:
                raise Unprocessable("give the pattern in q with regex=true, or in regex alone")
            text, as_regex = regex, True
    if text is None:
        return None
    try:
        return check_query(text, as_regex)
    except BadPattern as exc:
        raise Unprocessable(str(exc), code="bad_pattern", detail={"q": text}) from None


def bounded(search: Callable[[], T]) -> T:
    """Run a search; 422 when it ran past its time limit or the pattern was refused."""
    try:
        return search()
    except SearchTimeout as exc:
        raise Unprocessable(
            f"{exc}: narrow it (a longer text, a rank, a time range)", code="search_timeout"
        ) from None
    except BadPattern as exc:
        raise Unprocessable(str(exc), code="bad_pattern") from None


class FoundLogLine(BaseModel):
    job_id: str
    seq: int
    rank: int
    node: int
    ts: float
    line: str

    @classmethod
    def from_row(cls, row: LogLine) -> "FoundLogLine":
        return cls(
            job_id=row.job_id, seq=row.seq, rank=row.rank, node=row.node, ts=row.ts, line=row.line
        )


class FoundLogLines(BaseModel):
    items: list[FoundLogLine]


@router.get("", response_model=FoundLogLines)
def search_logs(
    session: SessionDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    q: SearchText = None,
    regex: RegexOption = None,
    since: datetime | None = None,
    until: datetime | None = None,
    owner: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> FoundLogLines:
    """Lines of the caller's jobs (an admin: every job, or `owner`'s) that match, newest
    first. `since`/`until`: ISO 8601 times or Unix seconds."""
    query = log_query(q, regex)
    if query is None:
        raise Unprocessable("give the text to search for in q", code="bad_pattern")
    if owner is not None and not principal.is_admin and owner != principal.name:
        raise Forbidden("only an admin may search another owner's logs")
    scope = owner if principal.is_admin else principal.name
    rows = bounded(
        lambda: search_owner_logs(
            session,
            scope,
            query,
            since=since.timestamp() if since is not None else None,
            before=until.timestamp() if until is not None else None,
            limit=limit,
            timeout_s=settings.log_search_timeout_s,
        )
    )
    return FoundLogLines(items=[FoundLogLine.from_row(r) for r in rows])


def search_job_lines(
    session: SessionDep,
    settings: SettingsDep,
    job_id: str,
    query: LogQuery,
    rank: int | None,
    node: int | None,
    after: int,
    limit: int,
) -> list[LogLine]:
    """`GET /v1/jobs/{id}/logs?q=`: the job's matching lines, paged like its other lines."""
    return bounded(
        lambda: search_job_logs(
            session,
            job_id,
            query,
            rank=rank,
            node=node,
            after=after,
            limit=limit,
            timeout_s=settings.log_search_timeout_s,
        )
    )
