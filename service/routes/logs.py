"""Every rank's output, paged by seq; and the nodes of a multi-node job."""

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from service import records
from service.deps import MAX_SEQ, OwnedJob, SessionDep, SettingsDep
from service.errors import BadRequest
from service.routes.log_search import RegexOption, SearchText, log_query, search_job_lines
from service.schemas import LogLinePublic, LogsPublic, NodePublic, NodesPublic

router = APIRouter(prefix="/v1/jobs", tags=["logs"])


@router.get("/{job_id}/logs", response_model=LogsPublic, response_model_exclude_none=True)
def get_logs(
    job: OwnedJob,
    session: SessionDep,
    settings: SettingsDep,
    rank: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    node: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    order: Annotated[
        Literal["asc", "desc"],
        Query(
            description="`desc`: the newest lines first (a job's tail); older pages follow "
            "with `before` = the page's `next_before`."
        ),
    ] = "asc",
    before: Annotated[
        int | None, Query(ge=1, le=MAX_SEQ, description="Only lines with a smaller seq.")
    ] = None,
    q: SearchText = None,
    regex: RegexOption = None,
) -> LogsPublic:
    newest_first = order == "desc"
    query = log_query(q, regex)
    if query is not None:
        if newest_first or before is not None:
            raise BadRequest("a search (q) pages forward with `after`; it takes no order or before")
        rows = search_job_lines(session, settings, job.id, query, rank, node, after, limit)
    else:
        rows = records.list_log_lines(
            session,
            job.id,
            rank=rank,
            node=node,
            after=after,
            limit=limit,
            before=before if before is not None else (job.last_seq + 1 if newest_first else None),
            newest_first=newest_first,
        )
    if newest_first:
        # The tail covers every line up to the job's seq when read: follow its events from
        # there (`next_after`), and page back from the oldest line shown (`next_before`).
        return LogsPublic(
            items=[LogLinePublic.from_row(r) for r in rows],
            next_after=max(after, job.last_seq if before is None else before - 1),
            next_before=rows[-1].seq if len(rows) == limit else None,
            lines_dropped=job.log_lines_dropped or None,
        )
    return LogsPublic(
        items=[LogLinePublic.from_row(r) for r in rows],
        next_after=rows[-1].seq if rows else after,
        lines_dropped=job.log_lines_dropped or None,
    )


@router.get("/{job_id}/nodes", response_model=NodesPublic)
def get_nodes(job: OwnedJob, session: SessionDep) -> NodesPublic:
    """The nodes of every attempt of a multi-node job: which worker ran each, on which host,
    and how it ended (empty for a single-node job)."""
    return NodesPublic(items=[NodePublic.from_row(r) for r in records.list_nodes(session, job.id)])
