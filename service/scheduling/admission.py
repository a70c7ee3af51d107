"""The writes of a dispatch pass, in its one transaction: the release of reservations whose
attempt is over or whose worker went away before taking it (the job then queued again:
`readmission`), and the admission (checked against the lease's fencing token). What it reads
first is in `waiting` (the queue) and `reservations`."""

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, exists, insert, select, tuple_, update
from sqlmodel import Session

from jobs.states import JobState
from service.models import Job, JobReservation
from service.scheduling.capacity import ActiveReservation
from service.scheduling.lease import Lease, fence
from service.scheduling.planner import Placement, QueuedJob
from service.scheduling.readmission import lost_worker_note, requeue_admission
from service.scheduling.reservations import LostAdmissions, ReservedJob

_job = Job.__table__  # type: ignore[attr-defined]
_reservation = JobReservation.__table__  # type: ignore[attr-defined]


def release(
    connection: Connection,
    stale: Sequence[ActiveReservation],
    jobs: dict[str, ReservedJob],
    lost: LostAdmissions,
    now: datetime,
) -> dict[str, int]:
    """Mark `stale` released: at the job's end when it ended, else now. A `lost` admission's
    job goes back to the queue as its next attempt first, and its reservations are kept if a
    worker took the attempt meanwhile (it runs). Returns the jobs queued again: their new
    attempt."""
    session = Session(bind=connection)
    requeued = {}
    for (job_id, attempt), gone in lost.items():
        new = requeue_admission(session, job_id, attempt, lost_worker_note(gone))
        if new is not None:
            requeued[job_id] = new
    for r in stale:
        if (r.job_id, r.attempt) in lost and r.job_id not in requeued:
            continue
        job = jobs.get(r.job_id)
        ended = job.finished_at if job is not None and job.attempt == r.attempt else None
        connection.execute(
            update(_reservation)
            .where(
                _reservation.c.job_id == r.job_id,
                _reservation.c.attempt == r.attempt,
                _reservation.c.node == r.node,
                _reservation.c.released_at.is_(None),
            )
            .values(released_at=min(ended, now) if ended is not None else now)
        )
    return requeued


def admit(
    connection: Connection,
    lease: Lease,
    lease_ttl_s: float,
    admitted: Sequence[tuple[QueuedJob, list[Placement]]],
    now: datetime,
) -> list[tuple[QueuedJob, dict[str, Any]]]:
    """Reserve the devices of each admitted job, all its nodes or none, in the caller's
    transaction, after checking the lease is still ours (`LeaseLost` otherwise: roll back).
    A job that left the queue since it was read, or is reserved already, is skipped; one
    whose attempt was reserved before and released is admitted as its next attempt. Returns
    the jobs reserved (at the attempt reserved), each with its spec (for the hand-over)."""
    fence(connection, lease, lease_ttl_s)
    earlier = earlier_reservations(connection, [job for job, _ in admitted])
    candidates = []
    for planned, placements in admitted:
        job = attempt_to_admit(connection, planned, earlier.get((planned.id, planned.attempt), []))
        if job is not None:
            candidates.append((job, placements))
    taken = take_queued(connection, [job for job, _ in candidates])
    reserved = []
    rows: list[dict[str, Any]] = []
    for job, placements in candidates:
        if job.id not in taken:
            continue
        reserved.append((job, taken[job.id]))
        rows += [
            {
                "job_id": job.id,
                "attempt": job.attempt,
                "node": p.node,
                "owner": job.owner,
                "worker": p.worker,
                "devices": list(p.devices),
                "token": lease.token,
                "admitted_at": now,
                "released_at": None,
            }
            for p in placements
        ]
    if rows:
        connection.execute(insert(_reservation), rows)
    return reserved


def take_queued(connection: Connection, jobs: Sequence[QueuedJob]) -> dict[str, dict[str, Any]]:
    """Of `jobs`, those still queued at their attempt with no active reservation, their
    position cleared: one UPDATE per 500 jobs. Returns each one's spec by id. The pending
    reason stays until a worker takes the job: its goodput ledger says why it waited
    (`service.records.take_job`)."""
    taken: dict[str, dict[str, Any]] = {}
    for start in range(0, len(jobs), 500):
        pairs = [(job.id, job.attempt) for job in jobs[start : start + 500]]
        rows = connection.execute(
            update(_job)
            .where(
                tuple_(_job.c.id, _job.c.attempt).in_(pairs),
                _job.c.state == JobState.QUEUED.value,
                ~exists().where(
                    _reservation.c.job_id == _job.c.id,
                    _reservation.c.attempt == _job.c.attempt,
                    _reservation.c.released_at.is_(None),
                ),
            )
            .values(queue_position=None)
            .returning(_job.c.id, _job.c.spec)
        )
        taken.update({r.id: dict(r.spec or {}) for r in rows})
    return taken


# (job id, attempt) → (worker, released_at) of each reservation it held.
EarlierReservations = dict[tuple[str, int], list[tuple[str, datetime | None]]]


def earlier_reservations(connection: Connection, jobs: Sequence[QueuedJob]) -> EarlierReservations:
    """The reservations that the attempts of `jobs` hold or held, in one query per 500 jobs."""
    wanted = {(job.id, job.attempt) for job in jobs}
    ids = sorted({job.id for job in jobs})
    found: EarlierReservations = {}
    for start in range(0, len(ids), 500):
        rows = connection.execute(
            select(
                _reservation.c.job_id,
                _reservation.c.attempt,
                _reservation.c.worker,
                _reservation.c.released_at,
            ).where(_reservation.c.job_id.in_(ids[start : start + 500]))
        )
        for r in rows:
            if (r.job_id, r.attempt) in wanted:
                found.setdefault((r.job_id, r.attempt), []).append((r.worker, r.released_at))
    return found


def attempt_to_admit(
    connection: Connection, job: QueuedJob, earlier: Sequence[tuple[str, datetime | None]]
) -> QueuedJob | None:
    """`job` as it can be admitted: as is, unless its attempt was reserved already (`earlier`,
    read in the same transaction): None while that holds, else (released: its worker went
    away before taking it, and the job was not queued again then, as a database of an
    earlier version may hold) its next attempt."""
    if not earlier:
        return job
    if any(released_at is None for _, released_at in earlier):
        return None
    note = lost_worker_note([worker for worker, _ in earlier])
    attempt = requeue_admission(Session(bind=connection), job.id, job.attempt, note)
    return None if attempt is None else replace(job, attempt=attempt)
