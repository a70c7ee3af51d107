"""A worker's record without a worker process: capacity that the dispatcher's tests and
benchmarks register, to be admitted onto without anything running there."""

from redis import Redis

from service.models import utcnow
from service.scheduling.capacity import dispatch_queue_name
from service.schemas import WorkerRecord
from service.worker_records import save_worker


def register_worker(
    redis: Redis,
    name: str,
    slots: int = 1,
    queues: tuple[str, ...] = ("default",),
    *,
    host: str = "devstack",
    ttl_s: float = 120,
) -> None:
    """An idle worker `name` with `slots` CPU slots on `queues`, for `ttl_s` seconds."""
    now = utcnow()
    record = WorkerRecord(
        name=name,
        host=host,
        pid=0,
        queues=list(queues),
        devices=[f"cpu:{i}" for i in range(slots)],
        state="idle",
        started_at=now,
        last_heartbeat=now,
        current_job=None,
        dispatch_queue=dispatch_queue_name(name),
    )
    save_worker(redis, record, ttl_s=ttl_s)
