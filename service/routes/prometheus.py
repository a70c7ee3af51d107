"""`GET /metrics`: the service's own numbers in Prometheus' text format."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from sqlalchemy import func
from sqlmodel import Session, col, select

from jobs.contract.goodput import PARTS, WAITING
from jobs.states import JobState
from service.deps import CurrentPrincipal, SessionDep
from service.models import Checkpoint, Job, JobGoodput, MetricPoint

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
        *goodput_lines(session),
    ]
    return PlainTextResponse("\n".join(lines) + "\n", media_type=CONTENT_TYPE)


def goodput_lines(session: Session) -> list[str]:
    """The ended jobs' goodput ledgers summed (docs/goodput.md): seconds and device-seconds
    per part, one query over the stored ledgers."""
    ledgers = JobGoodput.__table__  # type: ignore[attr-defined]
    sums: list[Any] = [func.count()]
    for part in PARTS:
        column = ledgers.c[f"{part}_s"]
        sums += [func.sum(column), func.sum(column * ledgers.c.devices)]
    row = session.connection().execute(select(*sums).select_from(ledgers)).one()
    seconds = {part: float(row[1 + 2 * i] or 0) for i, part in enumerate(PARTS)}
    held = {
        part: 0.0 if part in WAITING else float(row[2 + 2 * i] or 0) for i, part in enumerate(PARTS)
    }
    return [
        "# HELP launchbay_goodput_jobs_total Ended jobs with a goodput ledger.",
        "# TYPE launchbay_goodput_jobs_total counter",
        f"launchbay_goodput_jobs_total {row[0]}",
        "# HELP launchbay_goodput_seconds_total Wall seconds of ended jobs, by ledger part.",
        "# TYPE launchbay_goodput_seconds_total counter",
        *(f'launchbay_goodput_seconds_total{{part="{p}"}} {seconds[p]}' for p in PARTS),
        "# HELP launchbay_goodput_device_seconds_total Device-seconds held by ended jobs, by part.",
        "# TYPE launchbay_goodput_device_seconds_total counter",
        *(f'launchbay_goodput_device_seconds_total{{part="{p}"}} {held[p]}' for p in PARTS),
    ]
