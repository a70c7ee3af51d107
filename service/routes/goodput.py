"""Where jobs' wall time and device time went (docs/goodput.md): `GET /v1/jobs/{id}/goodput`
(one job's ledger, part by part, and each attempt's) and `GET /v1/goodput` (many jobs' summed
up by owner, queue and period)."""

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel
from sqlalchemy.engine import Engine

from jobs.contract.goodput import BADPUT, TRAINING
from service import records
from service.deps import CurrentPrincipal, JobSnapshot
from service.errors import Forbidden, Unprocessable
from service.models import utcnow
from service.records.goodput_summary import (
    GoodputSummary,
    SummaryQuery,
    Totals,
    read_goodput_summary,
)

router = APIRouter(tags=["goodput"])

DEFAULT_PERIOD = timedelta(days=7)
_RELATIVE = re.compile(r"(\d{1,6})([mhdw])")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class GoodputPart(BaseModel):
    name: str
    seconds: float
    device_seconds: float
    detail: str | None


class AttemptGoodput(BaseModel):
    attempt: int
    wall_s: float
    device_s: float
    goodput: float
    parts: list[GoodputPart]


class JobGoodputPublic(BaseModel):
    job_id: str
    # True once the job ended: the ledger stored then, which no longer changes.
    final: bool
    wall_s: float
    device_s: float
    goodput: float
    parts: list[GoodputPart]
    attempts: list[AttemptGoodput]


@router.get("/v1/jobs/{job_id}/goodput", response_model=JobGoodputPublic)
def read_job_goodput(job: JobSnapshot, request: Request) -> dict[str, Any]:
    """The job's wall time from submission to its end (or now) in named parts that add up to
    `wall_s`, with the device-seconds of each (docs/goodput.md)."""
    engine: Engine = request.app.state.engine
    with engine.connect() as connection:
        if job.state.is_terminal():
            stored = records.stored_ledger(connection, job.id)
            if stored is not None:
                return stored
        facts = records.ledger_job(job)
        ledger = records.read_ledgers(connection, [facts])[job.id]
    return records.ledger_body(ledger, job.id, final=False)


class BadputPart(BaseModel):
    name: str
    hours: float
    device_hours: float


class OwnerGoodput(BaseModel):
    owner: str
    jobs: int
    device_hours: float
    trained_device_hours: float
    goodput: float


class JobLossPublic(BaseModel):
    job_id: str
    name: str
    owner: str
    queue: str
    state: str
    device_hours: float
    trained_device_hours: float
    badput_device_hours: float
    goodput: float


class GoodputPublic(BaseModel):
    owner: str | None
    queue: str | None
    since: datetime
    until: datetime
    jobs: int
    wall_hours: float
    device_hours: float
    trained_device_hours: float
    badput_device_hours: float
    goodput: float
    badput: list[BadputPart]
    owners: list[OwnerGoodput]
    lost_most: list[JobLossPublic]


def parse_moment(name: str, value: str | None, now: datetime, default: datetime) -> datetime:
    """An ISO 8601 moment (UTC unless it says), or a duration before now: `30m`, `12h`, `7d`,
    `2w`; 422 otherwise."""
    if value is None or value == "":
        return default
    text = value.strip()
    relative = _RELATIVE.fullmatch(text)
    try:
        if relative is not None:
            return now - timedelta(seconds=int(relative[1]) * _UNITS[relative[2]])
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise Unprocessable(
            f"{name} is neither an ISO 8601 time nor a duration such as 7d",
            detail={name: value},
        ) from None


def _hours(seconds: float) -> float:
    return round(seconds / 3600, 6)


def _ratio(part: float, whole: float) -> float:
    return round(part / whole, 6) if whole > 0 else 0.0


def _owner_row(owner: str, totals: Totals) -> OwnerGoodput:
    trained = totals.device_seconds[TRAINING]
    return OwnerGoodput(
        owner=owner,
        jobs=totals.jobs,
        device_hours=_hours(totals.device_s),
        trained_device_hours=_hours(trained),
        goodput=_ratio(trained, totals.device_s),
    )


@router.get("/v1/goodput", response_model=GoodputPublic)
def read_goodput(
    request: Request,
    principal: CurrentPrincipal,
    owner: Annotated[str | None, Query(max_length=128, description="Admin only: whose.")] = None,
    queue: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[
        str | None, Query(max_length=64, description="ISO 8601, or a duration ago (7d, 12h)")
    ] = None,
    until: Annotated[
        str | None, Query(max_length=64, description="ISO 8601 (default: now)")
    ] = None,
    top: Annotated[int, Query(ge=1, le=100, description="How many jobs in lost_most")] = 10,
) -> GoodputPublic:
    """Device-hours held and trained, badput by part and the jobs that lost most, of the jobs
    that ended between `since` and `until` (and, when `until` is now, of those not ended yet,
    so far). An owner reads their own; an admin anyone's, or everyone's."""
    if owner is not None and not principal.is_admin and owner != principal.name:
        raise Forbidden("only an admin reads the goodput of other owners", detail={"owner": owner})
    if not principal.is_admin:
        owner = principal.name
    now = utcnow()
    end = parse_moment("until", until, now, now)
    start = parse_moment("since", since, now, end - DEFAULT_PERIOD)
    if start > end:
        detail = {"since": start.isoformat(), "until": end.isoformat()}
        raise Unprocessable("since is after until", detail=detail)
    query = SummaryQuery(start, end, owner, queue, top)
    engine: Engine = request.app.state.engine
    with engine.connect() as connection:
        summary = read_goodput_summary(connection, query, now)
    return goodput_answer(query, summary)


def goodput_answer(query: SummaryQuery, summary: GoodputSummary) -> GoodputPublic:
    """The summed ledgers as answered: hours, each owner's, the jobs that lost most."""
    total = summary.total()
    trained = total.device_seconds[TRAINING]
    badput = [
        BadputPart(
            name=part,
            hours=_hours(total.seconds[part]),
            device_hours=_hours(total.device_seconds[part]),
        )
        for part in BADPUT
    ]
    owners = sorted(summary.by_owner.items(), key=lambda item: (-item[1].device_s, item[0]))
    return GoodputPublic(
        owner=query.owner,
        queue=query.queue,
        since=query.since,
        until=query.until,
        jobs=total.jobs,
        wall_hours=_hours(total.wall_s),
        device_hours=_hours(total.device_s),
        trained_device_hours=_hours(trained),
        badput_device_hours=_hours(total.device_s - trained),
        goodput=_ratio(trained, total.device_s),
        badput=badput,
        owners=[_owner_row(name, totals) for name, totals in owners],
        lost_most=[
            JobLossPublic(
                job_id=j.job_id,
                name=j.name,
                owner=j.owner,
                queue=j.queue,
                state=j.state,
                device_hours=_hours(j.device_s),
                trained_device_hours=_hours(j.trained_device_s),
                badput_device_hours=_hours(j.device_s - j.trained_device_s),
                goodput=_ratio(j.trained_device_s, j.device_s),
            )
            for j in summary.lost_most
        ],
    )
