"""Every rank's output, paged by seq; and the nodes of a multi-node job."""

from typing import Annotated

from fastapi import APIRouter, Query

from service import store
from service.deps import MAX_SEQ, OwnedJob, SessionDep, SettingsDep
from service.routes.log_search import RegexOption, SearchText, log_query, search_job_lines
from service.schemas import LogLinePublic, LogsPublic, NodePublic, NodesPublic

router = APIRouter(prefix="/v1/jobs", tags=["logs"])


@router.get("/{job_id}/logs", response_model=LogsPublic)
def get_logs(
    job: OwnedJob,
    session: SessionDep,
    settings: SettingsDep,
    rank: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    node: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    q: SearchText = None,
    regex: RegexOption = None,
) -> LogsPublic:
    query = log_query(q, regex)
    if query is not None:
        rows = search_job_lines(session, settings, job.id, query, rank, node, after, limit)
    else:
        rows = store.list_log_lines(session, job.id, rank=rank, node=node, after=after, limit=limit)
    return LogsPublic(
        items=[LogLinePublic.from_row(r) for r in rows],
        next_after=rows[-1].seq if rows else after,
    )


@router.get("/{job_id}/nodes", response_model=NodesPublic)
def get_nodes(job: OwnedJob, session: SessionDep) -> NodesPublic:
    """The nodes of every attempt of a multi-node job: which worker ran each, on which host,
    and how it ended (empty for a single-node job)."""
    return NodesPublic(items=[NodePublic.from_row(r) for r in store.list_nodes(session, job.id)])
