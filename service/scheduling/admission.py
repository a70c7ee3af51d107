"""The database side of a dispatch pass: the queue as the planner reads it, the admission
(checked against the lease's fencing token, in the same transaction), the release of
reservations whose attempt is over or whose worker went away before taking it (the job then
queued again: `readmission`), and each waiting job's position and reason."""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, exists, insert, select, update
from sqlmodel import Session

from jobs.states import JobState
from service.models import Job, JobReservation
from service.records import PENDING_REASON_MAX, QueuedShown, show_queued
from service.scheduling.capacity import ActiveReservation
from service.scheduling.lease import Lease, fence
from service.scheduling.planner import Placement, QueuedJob, RunningJob
from service.scheduling.readmission import lost_worker_note, requeue_admission

_job = Job.__table__  # type: ignore[attr-defined]
_reservation = JobReservation.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class WaitingRow:
    job: QueuedJob
    position: int | None
    reason: str | None


# What the planner needs of a spec: (priority, nnodes, nproc_per_node). A spec never changes
# once stored, so the dispatcher keeps these by job id and reads each spec once.
SpecFacts = tuple[int, int, int]


def spec_facts(spec: dict[str, Any] | None) -> SpecFacts:
    spec = spec or {}
    return (
        int(spec.get("priority", 0)),
        int(spec.get("nnodes", 1)),
        int(spec.get("nproc_per_node", 1)),
    )


def load_specs(connection: Connection, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        rows = connection.execute(select(_job.c.id, _job.c.spec).where(_job.c.id.in_(chunk)))
        found.update({r.id: r.spec or {} for r in rows})
    return found


def load_queue(
    connection: Connection,
    reserved: Collection[tuple[str, int]],
    known: dict[str, SpecFacts],
    elsewhere: Collection[str] = (),
) -> list[WaitingRow]:
    """The queued jobs that no reservation holds yet, with what they last showed. `known`
    (job id → its spec's facts) is read from and added to; ids that left the queue go. Jobs
    of the queues `elsewhere` (another executor's) are not the dispatcher's."""
    rows = [
        r
        for r in connection.execute(
            select(
                _job.c.id,
                _job.c.attempt,
                _job.c.owner,
                _job.c.queue,
                _job.c.created_at,
                _job.c.queue_position,
                _job.c.pending_reason,
            ).where(_job.c.state == JobState.QUEUED.value)
        )
        if (r.id, r.attempt) not in reserved and r.queue not in elsewhere
    ]
    missing = [r.id for r in rows if r.id not in known]
    for job_id, spec in load_specs(connection, missing).items():
        known[job_id] = spec_facts(spec)
    waiting = {r.id for r in rows}
    for gone in [job_id for job_id in known if job_id not in waiting]:
        del known[gone]
    queue = []
    for r in rows:
        priority, nnodes, nproc = known.get(r.id, (0, 1, 1))
        job = QueuedJob(
            r.id, r.attempt, r.owner, r.queue, priority, nnodes, nproc, r.created_at.timestamp()
        )
        queue.append(WaitingRow(job, r.queue_position, r.pending_reason))
    return queue


@dataclass(frozen=True)
class ReservedJob:
    id: str
    attempt: int
    state: JobState | None
    priority: int
    finished_at: datetime | None
    message: str | None


def load_reserved_jobs(
    connection: Connection, reservations: Sequence[ActiveReservation]
) -> dict[str, ReservedJob]:
    ids = sorted({r.job_id for r in reservations})
    if not ids:
        return {}
    rows = connection.execute(
        select(
            _job.c.id,
            _job.c.attempt,
            _job.c.state,
            _job.c.spec,
            _job.c.finished_at,
            _job.c.message,
        ).where(_job.c.id.in_(ids))
    )
    return {
        r.id: ReservedJob(
            r.id,
            r.attempt,
            JobState(r.state),
            int((r.spec or {}).get("priority", 0)),
            r.finished_at,
            r.message,
        )
        for r in rows
    }


def stale_reservations(
    reservations: Sequence[ActiveReservation],
    jobs: dict[str, ReservedJob],
    live_workers: Collection[str],
) -> list[ActiveReservation]:
    """Reservations to release: their attempt is over (the job ended, was retried or is
    gone), or it is still queued on a worker that is gone (it goes back to the queue)."""
    stale = []
    gone_queued = set()
    for r in reservations:
        job = jobs.get(r.job_id)
        if job is None or job.attempt != r.attempt or job.state is None:
            stale.append(r)
        elif job.state.is_terminal():
            stale.append(r)
        elif job.state is JobState.QUEUED and r.worker not in live_workers:
            gone_queued.add((r.job_id, r.attempt))
    stale += [r for r in reservations if (r.job_id, r.attempt) in gone_queued]
    return stale


# (job id, attempt) → the workers of its reservations that went away.
LostAdmissions = dict[tuple[str, int], list[str]]


def lost_admissions(
    stale: Sequence[ActiveReservation],
    jobs: dict[str, ReservedJob],
    live_workers: Collection[str],
) -> LostAdmissions:
    """The attempts among `stale` that are still queued: admitted onto a worker that went
    away before it took them."""
    lost: LostAdmissions = {}
    for r in stale:
        job = jobs.get(r.job_id)
        if job is not None and job.attempt == r.attempt and job.state is JobState.QUEUED:
            gone = lost.setdefault((r.job_id, r.attempt), [])
            if r.worker not in live_workers:
                gone.append(r.worker)
    return lost


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


def running_jobs(
    reservations: Sequence[ActiveReservation], jobs: dict[str, ReservedJob], preempting: str
) -> list[RunningJob]:
    """The reserved jobs as preemption sees them; `preempting` marks a job's message when it
    is being stopped for another."""
    by_job: dict[str, list[ActiveReservation]] = {}
    for r in reservations:
        by_job.setdefault(r.job_id, []).append(r)
    running = []
    for job_id, held in by_job.items():
        job = jobs.get(job_id)
        if job is None or job.state is None or job.state.is_terminal():
            continue
        stopping = job.state is JobState.CANCELLING and (job.message or "").startswith(preempting)
        running.append(
            RunningJob(
                job_id,
                held[0].attempt,
                held[0].owner,
                job.priority,
                tuple(r.worker for r in held),
                tuple(len(r.devices) for r in held),
                stopping,
            )
        )
    return running


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
    reserved = []
    for planned, placements in admitted:
        job = attempt_to_admit(connection, planned)
        if job is None:
            continue
        taken = connection.execute(
            update(_job)
            .where(
                _job.c.id == job.id,
                _job.c.attempt == job.attempt,
                _job.c.state == JobState.QUEUED.value,
                ~exists().where(
                    _reservation.c.job_id == job.id,
                    _reservation.c.attempt == job.attempt,
                    _reservation.c.released_at.is_(None),
                ),
            )
            # The pending reason stays until a worker takes it: its goodput ledger says why it
            # waited (`service.records.take_job`).
            .values(queue_position=None)
            .returning(_job.c.spec)
        ).first()
        if taken is None:
            continue
        reserved.append((job, dict(taken.spec or {})))
        rows = [
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
        connection.execute(insert(_reservation), rows)
    return reserved


def attempt_to_admit(connection: Connection, job: QueuedJob) -> QueuedJob | None:
    """`job` as it can be admitted: as is, unless its attempt was reserved already: None while
    that holds, else (released: its worker went away before taking it, and the job was not
    queued again then, as a database of an earlier version may hold) its next attempt."""
    earlier = connection.execute(
        select(_reservation.c.worker, _reservation.c.released_at).where(
            _reservation.c.job_id == job.id, _reservation.c.attempt == job.attempt
        )
    ).all()
    if not earlier:
        return job
    if any(r.released_at is None for r in earlier):
        return None
    note = lost_worker_note([r.worker for r in earlier])
    attempt = requeue_admission(Session(bind=connection), job.id, job.attempt, note)
    return None if attempt is None else replace(job, attempt=attempt)


def show_waiting(
    connection: Connection,
    previous: dict[str, WaitingRow],
    waiting: Sequence[tuple[QueuedJob, str]],
) -> int:
    """Write each waiting job's position (1 first) and reason where they changed; returns how
    many rows changed."""
    changes = []
    for position, (job, reason) in enumerate(waiting, start=1):
        before = previous.get(job.id)
        reason = reason[:PENDING_REASON_MAX]
        if before is not None and before.position == position and before.reason == reason:
            continue
        changes.append(QueuedShown(job.id, job.attempt, position, reason))
    show_queued(connection, changes)
    return len(changes)


def reservations_of(connection: Connection, job_id: str, attempt: int) -> list[ActiveReservation]:
    rows = connection.execute(
        select(_reservation).where(
            _reservation.c.job_id == job_id,
            _reservation.c.attempt == attempt,
            _reservation.c.released_at.is_(None),
        )
    )
    return [
        ActiveReservation(r.job_id, r.attempt, r.node, r.owner, r.worker, tuple(r.devices or ()))
        for r in rows
    ]
