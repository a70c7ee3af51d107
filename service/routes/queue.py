"""What waits and what was used: GET /v1/queue (the queued jobs in the order they will run,
with why each waits) and GET /v1/usage (device-seconds per owner), under the dispatcher."""

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel
from sqlalchemy import select

from jobs.states import JobState
from service.deps import CurrentPrincipal, SessionDep, SettingsDep
from service.errors import BadRequest, Forbidden
from service.models import Job, utcnow
from service.scheduling.capacity import active_reservations
from service.scheduling.lease import current_lease
from service.scheduling.usage import usage_per_owner

router = APIRouter(tags=["scheduling"])
_job = Job.__table__  # type: ignore[attr-defined]


class QueueEntry(BaseModel):
    # 1 runs first; null until the dispatcher has placed it in the order.
    position: int | None
    # Another owner's job shows no id, name or owner.
    job_id: str | None
    name: str | None
    owner: str | None
    queue: str
    priority: int
    nnodes: int
    nproc_per_node: int
    created_at: datetime
    pending_reason: str | None


class DispatcherPublic(BaseModel):
    # The API process that dispatches (host:pid:…), and its fencing token.
    leader: str
    token: int
    expires_at: datetime


class QueuePublic(BaseModel):
    items: list[QueueEntry]
    total: int
    dispatcher: DispatcherPublic | None


@router.get("/v1/queue", response_model=QueuePublic)
def read_queue(
    session: SessionDep,
    principal: CurrentPrincipal,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> QueuePublic:
    rows = session.connection().execute(
        select(
            _job.c.id,
            _job.c.attempt,
            _job.c.name,
            _job.c.owner,
            _job.c.queue,
            _job.c.spec,
            _job.c.created_at,
            _job.c.queue_position,
            _job.c.pending_reason,
        ).where(_job.c.state == JobState.QUEUED.value)
    )
    # Admitted, not yet taken by its worker: no longer waiting.
    admitted = {(r.job_id, r.attempt) for r in active_reservations(session.connection())}
    entries = []
    for r in rows:
        if (r.id, r.attempt) in admitted:
            continue
        mine = principal.is_admin or r.owner == principal.name
        spec = r.spec or {}
        entries.append(
            QueueEntry(
                position=r.queue_position,
                job_id=r.id if mine else None,
                name=r.name if mine else None,
                owner=r.owner if mine else None,
                queue=r.queue,
                priority=int(spec.get("priority", 0)),
                nnodes=int(spec.get("nnodes", 1)),
                nproc_per_node=int(spec.get("nproc_per_node", 1)),
                created_at=r.created_at,
                pending_reason=r.pending_reason if mine else None,
            )
        )
    entries.sort(key=lambda e: (e.position is None, e.position or 0, -e.priority, e.created_at))
    lease = current_lease(session.connection())
    leader = None
    if lease is not None and lease[0] and lease[2].replace(tzinfo=UTC) > utcnow():
        leader = DispatcherPublic(leader=lease[0], token=lease[1], expires_at=lease[2])
    return QueuePublic(items=entries[:limit], total=len(entries), dispatcher=leader)


class OwnerUsagePublic(BaseModel):
    owner: str
    device_seconds: float
    jobs: int


class UsagePublic(BaseModel):
    since: datetime
    until: datetime
    items: list[OwnerUsagePublic]


@router.get("/v1/usage", response_model=UsagePublic)
def read_usage(
    session: SessionDep,
    principal: CurrentPrincipal,
    settings: SettingsDep,
    owner: Annotated[str | None, Query(max_length=128)] = None,
    since: Annotated[
        datetime | None, Query(description="From when (ISO 8601; default: one quota period ago)")
    ] = None,
) -> UsagePublic:
    """Device-seconds each owner's jobs held (from admission to the end of the attempt)."""
    if owner is not None and not principal.is_admin and owner != principal.name:
        raise Forbidden("only an admin reads the usage of other owners", detail={"owner": owner})
    if not principal.is_admin:
        owner = principal.name
    until = utcnow()
    if since is None:
        since = until - timedelta(seconds=settings.quota_period_s)
    try:
        since = since.replace(tzinfo=UTC) if since.tzinfo is None else since.astimezone(UTC)
    except OverflowError:
        raise BadRequest("since is out of range", detail={"since": str(since)}) from None
    if since > until:
        raise BadRequest("since is in the future", detail={"since": since.isoformat()})
    items = usage_per_owner(session.connection(), since, until, owner)
    return UsagePublic(
        since=since,
        until=until,
        items=[
            OwnerUsagePublic(owner=u.owner, device_seconds=u.device_seconds, jobs=u.jobs)
            for u in items
        ],
    )
