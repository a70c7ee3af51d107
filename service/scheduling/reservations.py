"""What a dispatch pass reads of the reservations: the reserved jobs (`load_reserved_jobs`),
the reservations to release (`stale_reservations`) and among them the admissions lost with
their worker (`lost_admissions`), the reserved jobs as preemption sees them (`running_jobs`),
a node's reserved devices (`reservations_of`), and the workers whose node of an earlier attempt
never recorded its end (`unfinished_node_workers`)."""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from sqlalchemy import Connection, select

from jobs.states import JobState
from service.models import Job, JobNode, JobReservation
from service.scheduling.capacity import ActiveReservation
from service.scheduling.planner import RunningJob, WorkerCapacity
from service.scheduling.usage import HeldSpan

_job = Job.__table__  # type: ignore[attr-defined]
_reservation = JobReservation.__table__  # type: ignore[attr-defined]
_node = JobNode.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ReservedJob:
    id: str
    attempt: int
    state: JobState | None
    priority: int
    finished_at: datetime | None
    message: str | None


def released_spans(
    released: Sequence[ActiveReservation],
    jobs: dict[str, ReservedJob],
    *,
    since: datetime,
    now: datetime,
) -> list[HeldSpan]:
    """What the reservations `released` now held since `since` (to their job's end, where
    it ended): usage read at `since` counted each held span up to then."""
    spans = []
    for r in released:
        job = jobs.get(r.job_id)
        end = job.finished_at if job is not None and job.attempt == r.attempt else None
        end = min(end or now, now)
        start = max(r.admitted_at or since, since)
        if end > start:
            spans.append(
                HeldSpan(r.owner, r.job_id, len(r.devices), start.timestamp(), end.timestamp())
            )
    return spans


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


def unfinished_node_workers(
    connection: Connection, retried: Collection[tuple[str, int]], since: datetime
) -> set[str]:
    """The workers of the nodes of earlier attempts of `retried` jobs (id, attempt now) that
    never recorded their end, heard from after `since`. Such a worker may have died with its
    node: a peer node sees a killed host at once and the job is retried at once, while the dead
    worker's record lives on for seconds. The dispatcher gives it no work meanwhile; the rule
    for silent workers takes over after `since`."""
    ids = sorted({job_id for job_id, _ in retried})
    now_at = dict(retried)
    found: set[str] = set()
    for start in range(0, len(ids), 500):  # one query per 500 jobs, as the queue's reads
        rows = connection.execute(
            select(_node.c.job_id, _node.c.attempt, _node.c.worker).where(
                _node.c.job_id.in_(ids[start : start + 500]),
                _node.c.finished_at.is_(None),
                _node.c.last_heartbeat > since,
            )
        )
        found.update(worker for job_id, attempt, worker in rows if attempt < now_at[job_id])
    return found


def without_lanes(pools: Sequence[WorkerCapacity], gone: Collection[str]) -> list[WorkerCapacity]:
    """`pools` without the lanes `gone` (a pool left with none is left out)."""
    kept = []
    for pool in pools:
        lanes = tuple(lane for lane in pool.lane_names() if lane not in gone)
        if lanes == pool.lane_names():
            kept.append(pool)
        elif lanes:
            kept.append(replace(pool, lanes=lanes))
    return kept
