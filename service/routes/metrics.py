"""Rank-0 metric points, paged by seq."""

from typing import Annotated

from fastapi import APIRouter, Query

from service import store
from service.deps import MAX_SEQ, OwnedJob, SessionDep
from service.schemas import MetricPointPublic, MetricsPublic

router = APIRouter(prefix="/v1/jobs", tags=["metrics"])


@router.get("/{job_id}/metrics", response_model=MetricsPublic)
def get_metrics(
    job: OwnedJob,
    session: SessionDep,
    name: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> MetricsPublic:
    rows = store.list_metric_points(session, job.id, name=name, after=after, limit=limit)
    return MetricsPublic(
        items=[MetricPointPublic.from_row(r) for r in rows],
        next_after=rows[-1].seq if rows else after,
    )
