"""Workers: the `launchbay worker` processes seen, from the heartbeat each keeps in Redis."""

from fastapi import APIRouter
from redis.exceptions import RedisError
from sqlmodel import col, select

from service.deps import CurrentPrincipal, RedisDep, SessionDep
from service.models import Job
from service.outages import Outage, outage_of, unavailable_error
from service.scheduling.capacity import active_reservations, reservations_by_worker
from service.schemas import WorkerPublic, WorkerReservation, WorkersPublic
from service.worker_records import load_worker_records

router = APIRouter(prefix="/v1/workers", tags=["workers"])


@router.get("", response_model=WorkersPublic)
def list_workers(
    redis: RedisDep, session: SessionDep, principal: CurrentPrincipal
) -> WorkersPublic:
    """Every worker whose heartbeat is current, by name. A job a worker runs is shown only to
    an admin or the job's owner (others see the worker busy, not with what)."""
    try:
        records = load_worker_records(redis)
    except RedisError as exc:
        raise unavailable_error(outage_of(exc) or Outage("redis", "unreachable")) from exc
    workers: list[WorkerPublic] = list(records)
    held = reservations_by_worker(active_reservations(session.connection()))
    for w in workers:
        w.reservations = [
            WorkerReservation(
                job_id=r.job_id, attempt=r.attempt, node=r.node, devices=list(r.devices)
            )
            for r in held.get(w.name, [])
        ]
    if not principal.is_admin:
        running = [w.current_job.id for w in workers if w.current_job is not None]
        running += [r.job_id for w in workers for r in w.reservations]
        stmt = select(Job.id).where(col(Job.id).in_(running), Job.owner == principal.name)
        visible = set(session.exec(stmt).all()) if running else set()
        for w in workers:
            if w.current_job is not None and w.current_job.id not in visible:
                w.current_job = None
            w.reservations = [r for r in w.reservations if r.job_id in visible]
    return WorkersPublic(items=workers)
