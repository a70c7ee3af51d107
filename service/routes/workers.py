"""Workers: the `launchbay worker` processes seen, from the heartbeat each keeps in Redis."""

from fastapi import APIRouter
from redis.exceptions import RedisError
from sqlmodel import col, select

from service.deps import CurrentPrincipal, RedisDep, SessionDep
from service.errors import ServiceUnavailable
from service.models import Job
from service.queue import load_worker_records
from service.schemas import WorkerPublic, WorkersPublic

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
        raise ServiceUnavailable(
            "Redis is unreachable: the workers cannot be listed",
            detail={"redis": f"error: {type(exc).__name__}"},
        ) from exc
    workers: list[WorkerPublic] = list(records)
    if not principal.is_admin:
        running = [w.current_job.id for w in workers if w.current_job is not None]
        stmt = select(Job.id).where(col(Job.id).in_(running), Job.owner == principal.name)
        visible = set(session.exec(stmt).all()) if running else set()
        for w in workers:
            if w.current_job is not None and w.current_job.id not in visible:
                w.current_job = None
    return WorkersPublic(items=workers)
