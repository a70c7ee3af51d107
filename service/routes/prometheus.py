"""`GET /metrics`: the service's own numbers in Prometheus' text format."""

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from sqlalchemy import func
from sqlmodel import col, select

from jobs.states import JobState
from service.deps import CurrentPrincipal, SessionDep
from service.models import Checkpoint, Job, MetricPoint

router = APIRouter(tags=["system"])
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get("/metrics", response_class=PlainTextResponse)
def prometheus_metrics(session: SessionDep, _principal: CurrentPrincipal) -> PlainTextResponse:
    by_state = dict(session.exec(select(Job.state, func.count()).group_by(col(Job.state))).all())
    points = session.exec(select(func.count()).select_from(MetricPoint)).one()
    live = col(Checkpoint.deleted_at).is_(None)
    checkpoints = session.exec(select(func.count()).select_from(Checkpoint).where(live)).one()
    stored = session.exec(select(func.coalesce(func.sum(Checkpoint.size), 0)).where(live)).one()
    lines = [
        "# HELP launchbay_jobs Jobs in the database by state.",
        "# TYPE launchbay_jobs gauge",
        *(f'launchbay_jobs{{state="{s}"}} {by_state.get(s, 0)}' for s in JobState),
        "# HELP launchbay_metric_points Metric points stored.",
        "# TYPE launchbay_metric_points gauge",
        f"launchbay_metric_points {points}",
        "# HELP launchbay_checkpoints Checkpoints registered.",
        "# TYPE launchbay_checkpoints gauge",
        f"launchbay_checkpoints {checkpoints}",
        "# HELP launchbay_checkpoint_bytes Bytes of registered checkpoint files.",
        "# TYPE launchbay_checkpoint_bytes gauge",
        f"launchbay_checkpoint_bytes {stored}",
    ]
    return PlainTextResponse("\n".join(lines) + "\n", media_type=CONTENT_TYPE)
