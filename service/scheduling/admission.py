"""The database side of a dispatch pass: the queue as the planner reads it, the admission
(checked against the lease's fencing token, in the same transaction), the release of
reservations whose attempt is over or whose worker went away before taking it (the job then
queued again: `readmission`), and each waiting job's position and reason."""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, exists, insert, select, tuple_, update
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
# once stored, so the dispatcher keeps these by job id and reads each spec once (`load_queue`).
SpecFacts = tuple[int, int, int]


def spec_facts(spec: dict[str, Any] | None) -> SpecFacts:
    spec = spec or {}
    return (
        int(spec.get("priority", 0)),
        int(spec.get("nnodes", 1)),
        int(spec.get("nproc_per_node", 1)),
    )


# What a waiting job last showed: (queue_position, pending_reason), by job id.
Shown = dict[str, tuple[int | None, str | None]]


def load_queue(
    connection: Connection,
    reserved: Collection[tuple[str, int]],
    known: dict[str, QueuedJob],
    elsewhere: Collection[str] = (),
    shown: Shown | None = None,
) -> list[WaitingRow]:
    """The queued jobs that no reservation holds yet, with what they last showed. `known`
    (job id → the job as the planner sees it: what never changes once stored) is read from
    and added to, so each pass reads two columns of each queued job and the rest of new ones
    only; ids that left the queue go. What each job showed is `shown` (what this dispatcher
    wrote), else read. Jobs of the queues `elsewhere` (another executor's) are not the
    dispatcher's."""
    columns = [_job.c.id, _job.c.attempt]
    if shown is None:
        columns += [_job.c.queue_position, _job.c.pending_reason]
    rows = [
        r
        for r in connection.execute(select(*columns).where(_job.c.state == JobState.QUEUED.value))
        if (r.id, r.attempt) not in reserved
    ]
    missing = [r.id for r in rows if r.id not in known]
    known.update(load_new_jobs(connection, missing))
    waiting = {r.id for r in rows}
    for gone in [job_id for job_id in known if job_id not in waiting]:
        del known[gone]
    queue = []
    for r in rows:
        job = known.get(r.id)
        if job is None or job.queue in elsewhere:
            continue
        if job.attempt != r.attempt:
            job = known[r.id] = replace(job, attempt=r.attempt)
        if shown is None:
            queue.append(WaitingRow(job, r.queue_position, r.pending_reason))
        else:
            queue.append(WaitingRow(job, *shown.get(r.id, (None, None))))
    return queue


def load_new_jobs(connection: Connection, ids: Sequence[str]) -> dict[str, QueuedJob]:
    """The queued jobs `ids` as the planner sees them, in one query per 500."""
    found: dict[str, QueuedJob] = {}
    for start in range(0, len(ids), 500):
        rows = connection.execute(
            select(
                _job.c.id,
                _job.c.attempt,
                _job.c.owner,
                _job.c.queue,
                _job.c.created_at,
                _job.c.spec,
            ).where(_job.c.id.in_(list(ids[start : start + 500])))
        )
        for r in rows:
            priority, nnodes, nproc = spec_facts(r.spec)
            found[r.id] = QueuedJob(
                r.id,
                r.attempt,
                r.owner,
                r.queue,
                priority,
                nnodes,
                nproc,
                r.created_at.timestamp(),
            )
    return found


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


def show_waiting(
    connection: Connection,
    previous: dict[str, WaitingRow],
    waiting: Sequence[tuple[QueuedJob, str]],
) -> int:
    """Write each waiting job's position (1 first) and reason where they changed; returns how
    many rows changed."""
    changes = waiting_changes(previous, waiting)
    show_queued(connection, changes)
    return len(changes)


def waiting_changes(
    previous: dict[str, WaitingRow], waiting: Sequence[tuple[QueuedJob, str]]
) -> list[QueuedShown]:
    """Each waiting job's position (1 first) and reason, where they differ from `previous`."""
    changes = []
    for position, (job, reason) in enumerate(waiting, start=1):
        before = previous.get(job.id)
        reason = reason[:PENDING_REASON_MAX]
        if before is not None and before.position == position and before.reason == reason:
            continue
        changes.append(QueuedShown(job.id, job.attempt, position, reason))
    return changes


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
