"""What the dispatcher places jobs on: the live workers (their records in Redis, expired
when they stop heart-beating) and the reservations held on them (database rows)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from redis import Redis
from sqlalchemy import Connection, select

from service.models import JobReservation
from service.scheduling.planner import WorkerCapacity
from service.schemas import WorkerRecord
from service.worker_records import load_worker_records

# Each worker's own RQ queue, on which the dispatcher hands it the nodes it admitted there.
DISPATCH_QUEUE_PREFIX = "launchbay.worker."


def dispatch_queue_name(worker_name: str) -> str:
    return f"{DISPATCH_QUEUE_PREFIX}{worker_name}"


def is_dispatch_queue(queue: str) -> bool:
    return queue.startswith(DISPATCH_QUEUE_PREFIX)


def pool_name(record: WorkerRecord) -> str:
    """The pool a worker's devices belong to: its own, unless it shares a pool on its host."""
    return f"{record.host}/{record.pool}" if record.pool else record.name


def capacity_of(records: Sequence[WorkerRecord]) -> list[WorkerCapacity]:
    """The pools of the workers that take dispatched work: a worker alone, or the workers of
    one pool on one host, sharing the devices (those of the pool's first worker by name) and
    serving the queues all of them serve."""
    pools: dict[str, list[WorkerRecord]] = {}
    for record in records:
        if record.dispatch_queue:
            pools.setdefault(pool_name(record), []).append(record)
    capacity = []
    for name, members in sorted(pools.items()):
        members.sort(key=lambda r: r.name)
        queues = frozenset.intersection(*(frozenset(m.queues) for m in members))
        lanes = tuple(m.name for m in members)
        capacity.append(WorkerCapacity(name, queues, tuple(members[0].devices), lanes))
    return capacity


def live_capacity(redis: Redis, *, silent_for_s: float | None = None) -> list[WorkerCapacity]:
    """Every pool of workers whose heartbeat is current and that take dispatched work; with
    `silent_for_s`, none whose last heartbeat is older than that. The dispatcher gives work to
    no worker silent for half the time that makes the reaper call its jobs lost (its record
    outlives it by up to 15 s, and its own heartbeat may be a beat newer than its job's: a
    killed worker given the retry of the job it lost would lose it too)."""
    records = load_worker_records(redis)
    if silent_for_s is not None:
        since = datetime.now(UTC) - timedelta(seconds=silent_for_s)
        records = [r for r in records if aware(r.last_heartbeat) >= since]
    return capacity_of(records)


def aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def live_lanes(capacity: Sequence[WorkerCapacity]) -> set[str]:
    return {lane for pool in capacity for lane in pool.lane_names()}


@dataclass(frozen=True)
class ActiveReservation:
    job_id: str
    attempt: int
    node: int
    owner: str
    worker: str
    devices: tuple[str, ...]
    # When it was admitted (read with the active reservations; not where unknown).
    admitted_at: datetime | None = None


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
            table.c.admitted_at,
        ).where(table.c.released_at.is_(None))
    )
    return [
        ActiveReservation(
            r.job_id,
            r.attempt,
            r.node,
            r.owner,
            r.worker,
            tuple(r.devices or ()),
            r.admitted_at,
        )
        for r in rows
    ]


def reservations_by_worker(
    reservations: Sequence[ActiveReservation],
) -> dict[str, list[ActiveReservation]]:
    by_worker: dict[str, list[ActiveReservation]] = {}
    for reservation in reservations:
        by_worker.setdefault(reservation.worker, []).append(reservation)
    return by_worker
