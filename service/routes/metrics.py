"""Rank-0 metric points, paged by seq, or downsampled for a chart."""

import json
import math
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from service import records
from service.deps import MAX_SEQ, OwnedJob, SessionDep
from service.errors import BadRequest
from service.models import Job
from service.schemas import MetricPointPublic, MetricsPublic

router = APIRouter(prefix="/v1/jobs", tags=["metrics"])


@router.get("/{job_id}/metrics", response_model=MetricsPublic)
def get_metrics(
    job: OwnedJob,
    session: SessionDep,
    name: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    max_points: Annotated[
        int | None,
        Query(
            ge=2,
            le=10_000,
            description="At most this many points per name, downsampled on the server: each "
            "bucket's smallest and largest point, of the seqs after `after` and up to `until` "
            "(a chart's zoomed range). `next_after` is then the job's seq when read: follow "
            "its events from there.",
        ),
    ] = None,
    until: Annotated[
        int | None,
        Query(ge=0, le=MAX_SEQ, description="With `max_points`: the last seq of the range."),
    ] = None,
) -> MetricsPublic | Response:
    if max_points is not None:
        if until is not None and until <= after:
            raise BadRequest(f"`until` ({until}) must be after `after` ({after})")
        return _downsampled(session, job, name, after, until, max_points)
    if until is not None:
        raise BadRequest("`until` bounds a downsampled range: it takes `max_points`")
    rows = records.list_metric_points(session, job.id, name=name, after=after, limit=limit)
    return MetricsPublic(
        items=[MetricPointPublic.from_row(r) for r in rows],
        next_after=rows[-1].seq if rows else after,
    )


def _downsampled(
    session: SessionDep,
    job: Job,
    name: str | None,
    after: int,
    until: int | None,
    max_points: int,
) -> Response:
    """Encoded here, in `MetricsPublic`'s shape: a page of charts holds thousands of points,
    and validating each through the response model cost more than reading it (F4)."""
    last_seq = job.last_seq if until is None else min(until, job.last_seq)
    names = [name] if name is not None else records.metric_names(session, job.id)
    rows: list[Any] = []  # rows of `POINT_COLUMNS`, unpacked below
    for each in names:
        rows += records.downsample(
            session, job.id, each, after=after, last_seq=last_seq, max_points=max_points
        )
    rows.sort(key=lambda row: row.seq)
    items = ",".join(
        _POINT.format(
            seq, _number(step), _number(epoch), json.dumps(name), _number(value), _number(ts), n
        )
        for seq, step, epoch, name, value, ts, n in rows
    )
    body = f'{{"items":[{items}],"next_after":{job.last_seq}}}'
    return Response(body, media_type="application/json")


_POINT = '{{"seq":{},"step":{},"epoch":{},"name":{},"value":{},"ts":{},"attempt":{}}}'


def _number(value: float | None) -> str:
    """As the response model writes a number: JSON has no NaN or infinity (null instead)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "null"
    return repr(value)
