"""Every rank's output, paged by seq."""

from typing import Annotated

from fastapi import APIRouter, Query

from service import store
from service.deps import MAX_SEQ, OwnedJob, SessionDep
from service.schemas import LogLinePublic, LogsPublic

router = APIRouter(prefix="/v1/jobs", tags=["logs"])


@router.get("/{job_id}/logs", response_model=LogsPublic)
def get_logs(
    job: OwnedJob,
    session: SessionDep,
    rank: Annotated[int | None, Query(ge=0, le=100_000)] = None,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> LogsPublic:
    rows = store.list_log_lines(session, job.id, rank=rank, after=after, limit=limit)
    return LogsPublic(
        items=[LogLinePublic.from_row(r) for r in rows],
        next_after=rows[-1].seq if rows else after,
    )
