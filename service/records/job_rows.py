"""Job rows outside the lifecycle's moves: create, find, list, heartbeat and delete."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, update
from sqlmodel import Session, col, select

from jobs.spec import JobSpec
from jobs.states import ACTIVE_STATES, JobState
from service.models import (
    AttemptMark,
    Checkpoint,
    Job,
    JobEvent,
    JobGoodput,
    JobNode,
    JobTag,
    LogLine,
    MetricPoint,
    MetricRollup,
    RankStack,
    utcnow,
)
from service.records.lifecycle import (
    JOB_TABLE,
    active_at,
    insert_state_event,
    last_sign_of_life,
    new_id,
)
from service.records.nodes import node_key


def create_job(
    session: Session,
    spec: JobSpec,
    *,
    owner: str = "",
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    warnings: Sequence[str] = (),
) -> Job:
    """A new job, `queued`, with the `warnings` said at its submission (committed; bounded by
    the caller, `service.records.job_warnings.merge_warnings`)."""
    job = Job(
        id=new_id(),
        name=spec.name,
        owner=owner,
        state=JobState.QUEUED,
        spec=spec.model_dump(mode="json"),
        queue=spec.queue,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        last_seq=1,  # the `queued` event's, inserted with the row: no one else sees it yet
        warnings=list(warnings),
        launcher_given="launcher" in spec.model_fields_set,
    )
    session.add(job)
    session.flush()
    for key, value in spec.tags.items():
        session.add(JobTag(job_id=job.id, key=key, value=value, created_at=job.created_at))
    insert_state_event(session, job.id, JobState.QUEUED, job.attempt, 1, {})
    session.commit()
    return job


def find_job_by_idempotency_key(session: Session, owner: str, key: str) -> Job | None:
    stmt = select(Job).where(Job.owner == owner, Job.idempotency_key == key)
    return session.exec(stmt).first()


def list_jobs(
    session: Session,
    *,
    owner: str | None,
    state: JobState | None,
    limit: int,
    offset: int,
    name: str | None = None,
    tags: Sequence[tuple[str, str]] = (),
    count_limit: int | None = None,
    name_contains: str | None = None,
) -> tuple[list[Job], int, bool]:
    """Jobs newest first, how many match in all, and whether that number is an estimate.
    `owner=None` means every owner; `name`, `name_contains` (any case; `%` and `_` are
    plain characters) and each (key, value) of `tags` narrow the list.

    Each filter has an index that holds its jobs newest first (`Job.__table_args__`, and
    `JobTag` for tags), so a page costs the same however many jobs there are. Counting costs
    what it counts: with `count_limit`, at most that many matches are counted; past it the
    total is `count_limit` and marked as an estimate (a lower bound)."""
    stmt, conditions = job_list_query(
        owner=owner, state=state, name=name, tags=tags, name_contains=name_contains
    )
    rows = list(session.exec(stmt.offset(offset).limit(limit)).all())
    total, estimated = count_jobs(session, conditions, count_limit)
    return rows, total, estimated


def job_list_query(
    *,
    owner: str | None = None,
    state: JobState | None = None,
    name: str | None = None,
    tags: Sequence[tuple[str, str]] = (),
    name_contains: str | None = None,
) -> tuple[Any, list[Any]]:
    """The SELECT of `list_jobs`, newest first, and its conditions (for counting). With tags,
    the jobs are read through the first tag's index, which holds them newest first too."""
    conditions: list[Any] = []
    if owner is not None:
        conditions.append(col(Job.owner) == owner)
    if state is not None:
        conditions.append(col(Job.state) == state)
    if name is not None:
        conditions.append(col(Job.name) == name)
    if name_contains:
        conditions.append(col(Job.name).icontains(name_contains, autoescape=True))
    for key, value in tags[1:]:
        tagged = select(JobTag.job_id).where(JobTag.key == key, JobTag.value == value)
        conditions.append(col(Job.id).in_(tagged))
    if not tags:
        stmt = select(Job).where(*conditions)
        return stmt.order_by(col(Job.created_at).desc(), col(Job.id).desc()), conditions
    key, value = tags[0]
    first = (col(JobTag.key) == key, col(JobTag.value) == value)
    stmt = (
        select(Job)
        .join(JobTag, col(JobTag.job_id) == col(Job.id))
        .where(*first, *conditions)
        .order_by(col(JobTag.created_at).desc(), col(JobTag.job_id).desc())
    )
    tagged = select(JobTag.job_id).where(*first)
    return stmt, [*conditions, col(Job.id).in_(tagged)]


def count_jobs(session: Session, conditions: list[Any], limit: int | None) -> tuple[int, bool]:
    """How many jobs match, counting at most `limit` + 1 of them (see `list_jobs`)."""
    if limit is None:
        return int(
            session.exec(select(func.count()).select_from(Job).where(*conditions)).one()
        ), False
    matching = select(col(Job.id)).where(*conditions).limit(limit + 1).subquery()
    counted = int(session.exec(select(func.count()).select_from(matching)).one())
    return (limit, True) if counted > limit else (counted, False)


def find_lost_jobs(session: Session, lost_before: datetime, limit: int = 100) -> list[Job]:
    """Active jobs (starting, running, cancelling) with no sign of life since `lost_before`."""
    stmt = (
        select(Job)
        .where(col(Job.state).in_(ACTIVE_STATES), last_sign_of_life() < lost_before)
        .order_by(col(Job.created_at))
        .limit(limit)
    )
    return list(session.exec(stmt).all())


def find_queued_jobs(session: Session, created_before: datetime, limit: int = 1000) -> list[Job]:
    """Queued jobs created before `created_before`, oldest first."""
    stmt = (
        select(Job)
        .where(col(Job.state) == JobState.QUEUED, col(Job.created_at) < created_before)
        .order_by(col(Job.created_at))
        .limit(limit)
    )
    return list(session.exec(stmt).all())


def find_jobs_on_queues(
    session: Session, queues: Sequence[str], states: Iterable[JobState], limit: int = 1000
) -> list[Job]:
    """Jobs on these queues in these states, oldest first."""
    stmt = (
        select(Job)
        .where(col(Job.queue).in_(list(queues)), col(Job.state).in_(list(states)))
        .order_by(col(Job.created_at))
        .limit(limit)
    )
    return list(session.exec(stmt).all())


def queued_since(session: Session, job_id: str, attempt: int) -> float | None:
    """When the job's attempt `attempt` was queued (Unix seconds), from its state events."""
    stmt = select(func.max(JobEvent.ts)).where(
        JobEvent.job_id == job_id, JobEvent.kind == "state", JobEvent.attempt == attempt
    )
    value = session.exec(stmt).one()
    return None if value is None else float(value)


@dataclass(frozen=True)
class QueuedShown:
    """What a queued job shows while it waits: its place in the dispatcher's queue (1 first;
    None on a queue the dispatcher does not order, e.g. Slurm's) and why it waits."""

    job_id: str
    attempt: int
    position: int | None
    reason: str | None


PENDING_REASON_MAX = 512  # Job.pending_reason's length

_SHOW_QUEUED = (
    update(JOB_TABLE)
    .where(
        JOB_TABLE.c.id == bindparam("b_id"),
        JOB_TABLE.c.attempt == bindparam("b_attempt"),
        JOB_TABLE.c.state == JobState.QUEUED.value,
    )
    .values(queue_position=bindparam("b_position"), pending_reason=bindparam("b_reason"))
)


def show_queued(connection: Connection, shown: Sequence[QueuedShown]) -> None:
    """Write each job's `queue_position` and `pending_reason`, only while it is still queued at
    that attempt (a job taken or retried since keeps what it has). The one writer of a queued
    job's pending reason: the dispatcher's (its queue) and the reaper's (Slurm's reason)."""
    if not shown:
        return
    rows = [
        {
            "b_id": s.job_id,
            "b_attempt": s.attempt,
            "b_position": s.position,
            "b_reason": s.reason[:PENDING_REASON_MAX] if s.reason is not None else None,
        }
        for s in shown
    ]
    connection.execute(_SHOW_QUEUED, rows)


def touch_job_heartbeat(
    session: Session, job_id: str, attempt: int, node: int | None = None
) -> JobState | None:
    """Set `last_heartbeat` of the job's running attempt (and of its node `node`, for a
    multi-node job) and return the job's state (and commit).

    None when the job is no longer this attempt's to run (retried, finished by someone else,
    deleted): the caller should stop.
    """
    stmt = (
        update(JOB_TABLE)
        .where(*active_at(job_id, attempt))
        .values(last_heartbeat=utcnow())
        .returning(col(Job.state))
    )
    state = session.execute(stmt).scalar_one_or_none()
    if state is not None and node is not None:
        session.execute(
            update(JobNode)
            .where(*node_key(job_id, attempt, node), col(JobNode.finished_at).is_(None))
            .values(last_heartbeat=utcnow())
        )
    session.commit()
    return None if state is None else JobState(state)


def delete_job_rows(session: Session, job_id: str) -> None:
    """Remove a job and every row it produced, in one transaction."""
    tables: Iterable[Any] = (
        JobEvent,
        MetricPoint,
        MetricRollup,
        LogLine,
        Checkpoint,
        JobNode,
        JobTag,
        RankStack,
        AttemptMark,
        JobGoodput,
    )
    for table in tables:
        session.execute(delete(table).where(col(table.job_id) == job_id))
    session.execute(delete(Job).where(col(Job.id) == job_id))
    session.commit()


def read_job_state(session: Session, job_id: str, attempt: int) -> JobState | None:
    """The job's state while `attempt` is its current attempt; None otherwise (retried,
    deleted)."""
    stmt = select(Job.state).where(Job.id == job_id, Job.attempt == attempt)
    state = session.exec(stmt).first()
    return None if state is None else JobState(state)


def record_launch_path(session: Session, job_id: str, attempt: int, path: str) -> bool:
    """The path (`warm` or `cold`) by which `attempt`, still the job's current one, starts its
    ranks (committed); False when the job is at another attempt or gone."""
    stmt = (
        update(Job)
        .where(col(Job.id) == job_id, col(Job.attempt) == attempt)
        .values(launch_path=path)
    )
    changed = session.execute(stmt).rowcount  # type: ignore[attr-defined]
    session.commit()
    return bool(changed)
