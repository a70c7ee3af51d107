"""The waiting jobs of a dispatch pass: the queue as the planner reads it (`load_queue`), and
each waiting job's position and reason (`waiting_changes`, `show_waiting`)."""

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, select

from jobs.states import JobState
from service.models import Job
from service.records import PENDING_REASON_MAX, QueuedShown, show_queued
from service.scheduling.planner import QueuedJob

_job = Job.__table__  # type: ignore[attr-defined]


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
