"""Workers: the `launchbay worker` processes seen, from the heartbeat each keeps in Redis."""

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError
from sqlmodel import col, select

from service.deps import CurrentPrincipal, RedisDep, SessionDep
from service.errors import ServiceUnavailable
from service.models import Job
from service.queue import read_worker_records

router = APIRouter(prefix="/v1/workers", tags=["workers"])


class WorkerJob(BaseModel):
    id: str
    attempt: int
    # The node of a multi-node job this worker runs.
    node: int | None = None


class WorkerPublic(BaseModel):
    name: str
    host: str
    pid: int
    queues: list[str]
    # The worker's devices (worker/devices.py): its CUDA ids, else its CPU slots, as
    # "cpu:0" ... "cpu:<N-1>". A job may have as many ranks per node as there are.
    devices: list[str]
    state: str  # idle | busy
    started_at: datetime
    last_heartbeat: datetime
    current_job: WorkerJob | None


class WorkersPublic(BaseModel):
    items: list[WorkerPublic]


@router.get("", response_model=WorkersPublic)
def list_workers(
    redis: RedisDep, session: SessionDep, principal: CurrentPrincipal
) -> WorkersPublic:
    """Every worker whose heartbeat is current, by name. A job a worker runs is shown only to
    an admin or the job's owner (others see the worker busy, not with what)."""
    try:
        records = read_worker_records(redis)
    except RedisError as exc:
        raise ServiceUnavailable(
            "Redis is unreachable: the workers cannot be listed",
            detail={"redis": f"error: {type(exc).__name__}"},
        ) from exc
    workers = []
    for record in records:
        try:
            workers.append(WorkerPublic.model_validate(record))
        except ValidationError:
            continue  # a record of another version, or damaged
    if not principal.is_admin:
        running = [w.current_job.id for w in workers if w.current_job is not None]
        stmt = select(Job.id).where(col(Job.id).in_(running), Job.owner == principal.name)
        visible = set(session.exec(stmt).all()) if running else set()
        for w in workers:
            if w.current_job is not None and w.current_job.id not in visible:
                w.current_job = None
    return WorkersPublic(items=workers)
