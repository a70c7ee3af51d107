"""Job rows outside the lifecycle's moves: create, find, list, heartbeat and delete."""

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, update
from sqlmodel import Session, col, select

from jobs.spec import JobSpec
from jobs.states import ACTIVE_STATES, JobState
from service.models import Checkpoint, Job, JobEvent, JobNode, LogLine, MetricPoint, utcnow
from service.store.lifecycle import (
    JOB_TABLE,
    active_at,
    insert_state_event,
    last_sign_of_life,
    new_id,
)
from service.store.nodes import node_key


def create_job(
    session: Session,
    spec: JobSpec,
    *,
    owner: str = "",
    idempotency_key: str | None = None,
    request_hash: str | None = None,
) -> Job:
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
    )
    session.add(job)
    session.flush()
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
) -> tuple[list[Job], int]:
    """Jobs newest first, and how many match in all. `owner=None` means every owner; `name`
    and each (key, value) of `tags` narrow the list (a tag is read from the spec's JSON)."""
    conditions = []
    if owner is not None:
        conditions.append(col(Job.owner) == owner)
    if state is not None:
        conditions.append(col(Job.state) == state)
    if name is not None:
        conditions.append(col(Job.name) == name)
    for key, value in tags:
        conditions.append(col(Job.spec)["tags"][key].as_string() == value)
    total = session.exec(select(func.count()).select_from(Job).where(*conditions)).one()
    stmt = (
        select(Job)
        .where(*conditions)
        .order_by(col(Job.created_at).desc(), col(Job.id).desc())
        .offset(offset)
        .limit(limit)
    )
    return list(session.exec(stmt).all()), int(total)


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
    tables: Iterable[Any] = (JobEvent, MetricPoint, LogLine, Checkpoint, JobNode)
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
