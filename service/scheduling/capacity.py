"""What the dispatcher places jobs on: the live workers (their records in Redis, expired
when they stop heart-beating) and the reservations held on them (database rows)."""

from collections.abc import Sequence
from dataclasses import dataclass

from redis import Redis
from sqlalchemy import Connection, select

from service.models import JobReservation
from service.queue import load_worker_records
from service.scheduling.planner import WorkerCapacity
from service.schemas import WorkerRecord

# Each worker's own RQ queue, on which the dispatcher hands it the nodes it admitted there.
DISPATCH_QUEUE_PREFIX = "launchbay.worker."


def dispatch_queue_name(worker_name: str) -> str:
    return f"{DISPATCH_QUEUE_PREFIX}{worker_name}"


def is_dispatch_queue(queue: str) -> bool:
    return queue.startswith(DISPATCH_QUEUE_PREFIX)


def capacity_of(record: WorkerRecord) -> WorkerCapacity | None:
    """A worker's capacity from its record; None for a worker that takes no dispatched work."""
    if not record.dispatch_queue:
        return None
    return WorkerCapacity(record.name, frozenset(record.queues), tuple(record.devices))


def live_capacity(redis: Redis) -> list[WorkerCapacity]:
    """Every worker whose heartbeat is current and that takes dispatched work."""
    found = (capacity_of(record) for record in load_worker_records(redis))
    return [c for c in found if c is not None]


@dataclass(frozen=True)
class ActiveReservation:
    job_id: str
    attempt: int
    node: int
    owner: str
    worker: str
    devices: tuple[str, ...]


def active_reservations(connection: Connection) -> list[ActiveReservation]:
    table = JobReservation.__table__  # type: ignore[attr-defined]
    rows = connection.execute(
        select(
            table.c.job_id,
            table.c.attempt,
            table.c.node,
            table.c.owner,
            table.c.worker,
            table.c.devices,
        ).where(table.c.released_at.is_(None))
    )
    return [
        ActiveReservation(r.job_id, r.attempt, r.node, r.owner, r.worker, tuple(r.devices or ()))
        for r in rows
    ]


def reservations_by_worker(
    reservations: Sequence[ActiveReservation],
) -> dict[str, list[ActiveReservation]]:
    by_worker: dict[str, list[ActiveReservation]] = {}
    for reservation in reservations:
        by_worker.setdefault(reservation.worker, []).append(reservation)
    return by_worker
