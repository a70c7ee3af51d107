"""The lifecycle core of the store: a job's moves between states, its retries, the end of an
attempt, and the allocation of the seqs that order everything a job records.

State changes are conditional updates (`UPDATE job ... WHERE state IN (<sources>)`), so a
repeated, late or racing change does no harm: it simply matches no row and returns False.
What a worker writes for an attempt (metrics, logs, checkpoints, heartbeats) is likewise
conditional on the job still being active at that attempt; see `AttemptSuperseded`.

Every change of a job's state is `move`'s UPDATE, from the states `jobs.states.sources_of`
allows (the transition table's, or a caller's narrower set it checks against the table).

Functions named `..._job` commit; the others (`move`, `transition`, `requeue`, `end_attempt`)
leave the transaction to their caller, so that the modules above can combine them.
"""

import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, insert, update
from sqlmodel import Session, col, select

from jobs.states import (
    ACTIVE_STATES,
    RETRYABLE_EXIT_REASONS,
    ExitReason,
    JobState,
    sources_of,
)
from service.models import Job, JobEvent, utcnow
from service.records.goodput import store_job_ledger
from service.records.webhook_outbox import enqueue_state_deliveries

# The job table for Core UPDATEs on the hot paths (state changes, seqs, heartbeats, progress):
# an UPDATE of the ORM class takes SQLAlchemy's bulk-update path, which costs more than the
# statement (it looks for the rows' objects in the session to synchronize them). Callers that
# hold a Job object refresh it.
JOB_TABLE = Job.__table__  # type: ignore[attr-defined]


class AttemptSuperseded(Exception):
    """A worker wrote for an attempt that is no longer the job's active one (retried, ended or
    cancelled by someone else, deleted): nothing was written, and the attempt should stop."""


def new_id() -> str:
    return uuid.uuid4().hex


def last_sign_of_life() -> ColumnElement[Any]:
    """When a worker last showed it runs the job: its heartbeat, else when it took the job."""
    return func.coalesce(col(Job.last_heartbeat), col(Job.started_at), col(Job.created_at))


def active_at(job_id: str, attempt: int) -> tuple[ColumnElement[bool], ...]:
    """The job, while `attempt` is its active (starting, running, cancelling) attempt."""
    return (
        col(Job.id) == job_id,
        col(Job.attempt) == attempt,
        col(Job.state).in_(ACTIVE_STATES),
    )


def allocate_seq(
    session: Session, job_id: str, count: int = 1, *, attempt: int | None = None
) -> int:
    """Reserve `count` consecutive seqs of a job and return the first.

    The row lock taken here is held until commit, so seqs become visible in order. With
    `attempt` (a worker's write), that must be the job's active attempt, else
    AttemptSuperseded (rolled back, nothing written).
    """
    conditions = active_at(job_id, attempt) if attempt is not None else (col(Job.id) == job_id,)
    stmt = (
        update(JOB_TABLE)
        .where(*conditions)
        .values(last_seq=Job.last_seq + count)
        .returning(col(Job.last_seq))
    )
    last = session.execute(stmt).scalar_one_or_none()
    if last is None:
        session.rollback()
        raise AttemptSuperseded(f"job {job_id} is no longer run by attempt {attempt}")
    return int(last) - count + 1


def insert_event(
    session: Session, job_id: str, kind: str, attempt: int, seq: int, data: dict[str, Any]
) -> None:
    """One row of the job's event history (not committed); `seq` is already allocated."""
    row = {
        "job_id": job_id,
        "seq": seq,
        "kind": kind,
        "attempt": attempt,
        "ts": time.time(),
        "data": data,
    }
    session.execute(insert(JobEvent.__table__).values(**row))  # type: ignore[attr-defined]


def insert_state_event(
    session: Session, job_id: str, state: JobState, attempt: int, seq: int, detail: dict[str, Any]
) -> None:
    insert_event(session, job_id, "state", attempt, seq, {"state": str(state), **detail})
    enqueue_state_deliveries(session, job_id, state, seq)


def add_attempt_event(
    session: Session, job_id: str, kind: str, attempt: int, data: dict[str, Any]
) -> None:
    """Record a non-state event of a worker's attempt (e.g. an elastic restart) and commit;
    AttemptSuperseded, writing nothing, unless the job is active at `attempt`."""
    seq = allocate_seq(session, job_id, attempt=attempt)
    insert_event(session, job_id, kind, attempt, seq, data)
    session.commit()


def event_detail(fields: dict[str, Any]) -> dict[str, Any]:
    """What a state event shows of the columns a move sets: the exit fields and the worker."""
    return {k: fields[k] for k in ("exit_code", "exit_reason", "message", "worker") if k in fields}


def move(
    session: Session,
    job_id: str,
    target: JobState,
    attempt: int | None,
    lost_before: datetime | None,
    fields: dict[str, Any],
    *returning: Any,
    sources: Iterable[JobState] | None = None,
    detail: dict[str, Any] | None = None,
) -> Any:
    """One conditional UPDATE of the job's row, from a state `sources_of(target, sources)`
    allows (ForbiddenTransition, before any write, for one the table does not hold), which
    also takes the state event's seq, then the event (`detail`, else the exit fields set).
    Returns the updated row (its `attempt`, `last_seq` and `returning` columns) or None."""
    allowed = sources_of(target, sources)
    values: dict[str, Any] = {"state": target, "last_seq": col(Job.last_seq) + 1, **fields}
    if target.is_terminal():
        values.setdefault("finished_at", utcnow())
    stmt = update(JOB_TABLE).where(col(Job.id) == job_id, col(Job.state).in_(allowed))
    if attempt is not None:
        stmt = stmt.where(col(Job.attempt) == attempt)
    if lost_before is not None:
        stmt = stmt.where(last_sign_of_life() < lost_before)
    returned = (col(Job.attempt), col(Job.last_seq), *returning)
    row = session.execute(stmt.values(**values).returning(*returned)).one_or_none()
    if row is None:
        return None
    if detail is None:
        detail = event_detail(fields)
    insert_state_event(session, job_id, target, int(row.attempt), int(row.last_seq), detail)
    if target.is_terminal():  # its goodput ledger, written once with its end
        store_job_ledger(session.connection(), job_id)
    return row


def transition(
    session: Session,
    job_id: str,
    target: JobState,
    *,
    attempt: int | None = None,
    lost_before: datetime | None = None,
    **fields: Any,
) -> bool:
    """`transition_job` without the commit (or the rollback when nothing moved)."""
    return move(session, job_id, target, attempt, lost_before, fields) is not None


def transition_job(
    session: Session,
    job_id: str,
    target: JobState,
    *,
    attempt: int | None = None,
    lost_before: datetime | None = None,
    **fields: Any,
) -> bool:
    """Move a job to `target` if its current state allows it; commit and return whether it did.

    `attempt`, when given, must match the job's attempt, so a worker of an earlier attempt
    cannot move a job that has since been retried. `lost_before`, when given, must be later
    than the job's last sign of life (the reaper's condition). `fields` are other columns to set.
    """
    moved = transition(session, job_id, target, attempt=attempt, lost_before=lost_before, **fields)
    if moved:
        session.commit()
    else:
        session.rollback()
    return moved


@dataclass(frozen=True)
class TakenJob:
    """What a worker that took a job's attempt runs it with: the spec (as accepted, defaults
    filled), the job's owner, and whether its spec named its launcher."""

    spec: dict[str, Any]
    owner: str
    launcher_given: bool = True


def take_job(session: Session, job_id: str, attempt: int, **fields: Any) -> TakenJob | None:
    """Move the job `queued → starting` at `attempt` (committed) and return its spec and owner;
    None, having changed nothing, when it is not queued at that attempt any more."""
    # Why it waited (the scheduler's last reason), kept in the event for its goodput ledger.
    waited = session.exec(select(Job.pending_reason).where(col(Job.id) == job_id)).first()
    detail = event_detail(fields)
    if waited:
        detail["pending_reason"] = waited
    fields = {**fields, "pending_reason": None, "queue_position": None}
    taken = (col(Job.spec), col(Job.owner), col(Job.launcher_given))
    moved = move(session, job_id, JobState.STARTING, attempt, None, fields, *taken, detail=detail)
    if moved is None:
        session.rollback()
        return None
    session.commit()
    return TakenJob(dict(moved.spec), moved.owner, bool(moved.launcher_given))


def requeue(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    exit_reason: ExitReason,
    exit_code: int | None,
    message: str | None,
    lost_before: datetime | None = None,
) -> Job | None:
    """`requeue_job` without the commit (or the rollback when it did not retry)."""
    if exit_reason not in RETRYABLE_EXIT_REASONS:
        return None
    job = session.get(Job, job_id)
    if job is None or job.attempt != attempt:
        return None
    max_retries = job.job_spec().max_retries
    preempted = exit_reason is ExitReason.PREEMPTED
    # A preemption is the scheduler's doing: it uses none of the job's retries, and it stops
    # the attempt through `cancelling`. Nor does an admission lost with its worker.
    if not preempted and attempt - job.preemptions - job.lost_admissions > max_retries:
        return None
    from_states = [JobState.STARTING, JobState.RUNNING]
    if preempted:
        from_states.append(JobState.CANCELLING)
    note = f"retry {attempt} of {max_retries}: attempt {attempt} ended with {exit_reason}"
    if preempted:
        note = f"attempt {attempt} was preempted; queued again (no retry used)"
    values = {
        "preemptions": col(Job.preemptions) + int(preempted),
        "attempt": attempt + 1,
        "started_at": None,
        "finished_at": None,
        "last_heartbeat": None,
        "eta_s": None,
        "eta_at": None,
        "worker": None,
        "pending_reason": None,
        "exit_code": None,
        "exit_reason": None,
        "message": f"{note}: {message}" if message else note,
    }
    detail = {
        "retry_of": attempt,
        "exit_code": exit_code,
        "exit_reason": str(exit_reason),
        "message": message,
    }
    moved = move(
        session,
        job_id,
        JobState.QUEUED,
        attempt,
        lost_before,
        values,
        sources=from_states,
        detail=detail,
    )
    return job if moved is not None else None


def requeue_job(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    exit_reason: ExitReason,
    exit_code: int | None = None,
    message: str | None = None,
    lost_before: datetime | None = None,
) -> Job | None:
    """Retry a job whose attempt `attempt` failed with `exit_reason`: back to `queued` as
    attempt + 1, its exit fields, start, heartbeat and worker cleared (committed).

    Only when the reason is retried (RETRYABLE_EXIT_REASONS), the spec's `max_retries` are not
    used up, and the job is still starting or running at that attempt (and, with `lost_before`,
    has shown no sign of life since). Returns the job, for the caller to submit now that it is
    committed; None, having changed nothing, otherwise (the caller then fails the job).
    """
    job = requeue(
        session,
        job_id,
        attempt,
        exit_reason=exit_reason,
        exit_code=exit_code,
        message=message,
        lost_before=lost_before,
    )
    if job is None:
        session.rollback()
        return None
    session.commit()
    session.refresh(job)
    return job


@dataclass(frozen=True)
class AttemptEnd:
    """What recording the end of an attempt did: whether the job's state changed, and the job
    queued again as its next attempt, for the caller to submit once committed
    (`service.executors.base.submit_retry`)."""

    recorded: bool = False
    retried: Job | None = None


def end_attempt(
    session: Session,
    job_id: str,
    attempt: int,
    state: JobState,
    *,
    exit_reason: ExitReason,
    lost_before: datetime | None = None,
    retry: bool = True,
    **fields: Any,
) -> AttemptEnd:
    """Record that attempt `attempt` ended in `state` (not committed): the one place where an
    attempt's end becomes the job's. `fields` are the other exit columns (`exit_code`,
    `message`), set and shown in the state event as given.

    A failure whose reason is retried goes back to `queued` as the next attempt while the
    spec's `max_retries` allow (and `retry`); otherwise the job moves to `state` with the exit
    fields, a cancel by way of `cancelling`. Nothing changes when the job is no longer at that
    attempt or, with `lost_before` (the reaper), showed a sign of life since.
    """
    if state is JobState.FAILED and retry:
        retried = requeue(
            session,
            job_id,
            attempt,
            exit_reason=exit_reason,
            exit_code=fields.get("exit_code"),
            message=fields.get("message"),
            lost_before=lost_before,
        )
        if retried is not None:
            return AttemptEnd(recorded=True, retried=retried)
    if state is JobState.CANCELLED:
        # Normally the API has already moved the job to cancelling.
        transition(session, job_id, JobState.CANCELLING, attempt=attempt, lost_before=lost_before)
    moved = transition(
        session,
        job_id,
        state,
        attempt=attempt,
        lost_before=lost_before,
        exit_reason=exit_reason,
        **fields,
    )
    return AttemptEnd(recorded=moved)


def commit_end(session: Session, end: AttemptEnd) -> AttemptEnd:
    """Commit what `end_attempt` recorded (the retried job refreshed for its submission)."""
    session.commit()
    if end.retried is not None:
        session.refresh(end.retried)
    return end


def lock_job(session: Session, job_id: str) -> Job | None:
    """The job's row, locked until commit: whoever changes the nodes of an attempt takes it
    first, so their decisions (who hosts, who finishes last) are made one at a time. A no-op
    UPDATE, because SQLite has no SELECT ... FOR UPDATE (an UPDATE takes its write lock)."""
    session.execute(update(Job).where(col(Job.id) == job_id).values(last_seq=Job.last_seq))
    stmt = select(Job).where(Job.id == job_id).execution_options(populate_existing=True)
    return session.exec(stmt).first()
