"""Multi-node jobs (`nnodes` > 1): each node's task joins the attempt, and the attempt ends as
a whole (docs/multi-node.md)."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, update
from sqlmodel import Session, col, select

from jobs.states import ACTIVE_STATES, ExitReason, JobState, NodeState
from service.models import Job, JobNode, utcnow
from service.records.lifecycle import AttemptEnd, end_attempt, lock_job, transition


@dataclass(frozen=True)
class NodeSeat:
    """What a node that joined an attempt runs with: the rendezvous endpoint (`host:port`),
    whether this node hosts it, how long every node may take to join (the spec's, None: the
    worker's default), the job's spec and its owner."""

    endpoint: str
    is_host: bool
    spec: dict[str, Any]
    rendezvous_timeout_s: float | None = None
    owner: str = ""


def node_key(job_id: str, attempt: int, node: int) -> tuple[ColumnElement[bool], ...]:
    return (
        col(JobNode.job_id) == job_id,
        col(JobNode.attempt) == attempt,
        col(JobNode.node) == node,
    )


def join_node(
    session: Session,
    job_id: str,
    attempt: int,
    node: int,
    *,
    worker: str,
    host: str,
    endpoint: str,
) -> NodeSeat | None:
    """Take node `node` of attempt `attempt` of a multi-node job (committed).

    The first node to join moves the job from queued to starting and hosts the rendezvous at
    `endpoint` (this worker's `host:port`); a later one gets that endpoint. None, changing
    nothing, when the attempt is no longer the job's, no longer takes nodes (every node has
    joined, or it is cancelling or over) or this node has been taken already.
    """
    job = lock_job(session, job_id)
    if (
        job is None
        or job.attempt != attempt
        or job.state not in (JobState.QUEUED, JobState.STARTING)
        or not 0 <= node < job.job_spec().nnodes
        or session.get(JobNode, (job_id, attempt, node)) is not None
    ):
        session.rollback()
        return None
    now = utcnow()
    hosting = job.state == JobState.QUEUED
    meeting_at = _rendezvous_endpoint(session, job_id, attempt, hosting, worker, endpoint, now)
    if meeting_at is None:
        session.rollback()
        return None
    session.add(
        JobNode(
            job_id=job_id,
            attempt=attempt,
            node=node,
            worker=worker,
            host=host,
            endpoint=endpoint if hosting else None,
            state=NodeState.STARTING,
            joined_at=now,
            last_heartbeat=now,
        )
    )
    spec, timeout_s, owner = dict(job.spec), job.job_spec().rendezvous_timeout_s, job.owner
    session.commit()
    return NodeSeat(meeting_at, hosting, spec, timeout_s, owner)


def _rendezvous_endpoint(
    session: Session,
    job_id: str,
    attempt: int,
    hosting: bool,
    worker: str,
    endpoint: str,
    now: datetime,
) -> str | None:
    """Where the attempt's nodes meet: the first node (`hosting`) moves the job to starting and
    hosts it at its own `endpoint`; a later one finds the host's. None when neither holds."""
    if not hosting:
        return _hosted_at(session, job_id, attempt)
    moved = transition(
        session,
        job_id,
        JobState.STARTING,
        attempt=attempt,
        worker=worker,
        started_at=now,
        last_heartbeat=now,
    )
    return endpoint if moved else None


def _hosted_at(session: Session, job_id: str, attempt: int) -> str | None:
    """The rendezvous endpoint of the attempt, from the row of the node that hosts it."""
    stmt = select(JobNode.endpoint).where(
        JobNode.job_id == job_id,
        JobNode.attempt == attempt,
        col(JobNode.endpoint).is_not(None),
    )
    return session.exec(stmt).first()


def mark_node_running(session: Session, job_id: str, attempt: int, node: int) -> None:
    """The node's ranks have started (committed)."""
    session.execute(
        update(JobNode)
        .where(*node_key(job_id, attempt, node), col(JobNode.state) == NodeState.STARTING)
        .values(state=NodeState.RUNNING)
    )
    session.commit()


def announce_node_failure(
    session: Session,
    job_id: str,
    attempt: int,
    node: int,
    *,
    exit_reason: ExitReason,
    message: str,
) -> None:
    """Note, before the node stops its processes, why it fails (committed): its peers' ranks
    will fail next, and the attempt must end with this cause, not theirs (`finish_node`)."""
    session.execute(
        update(JobNode)
        .where(
            *node_key(job_id, attempt, node),
            col(JobNode.finished_at).is_(None),
            col(JobNode.failed_at).is_(None),
        )
        .values(failed_at=utcnow(), exit_reason=exit_reason, message=message)
    )
    session.commit()


def finish_node(
    session: Session,
    job_id: str,
    attempt: int,
    node: int,
    *,
    state: NodeState,
    exit_reason: ExitReason | None = None,
    exit_code: int | None = None,
    message: str | None = None,
    lost_before: datetime | None = None,
) -> AttemptEnd:
    """Record how node `node` of a multi-node attempt ended (`state`: succeeded, failed,
    cancelled or stopped) and, when that decides the attempt, the job's outcome (committed):

    - a failure ends the attempt at once: the job fails, or is queued again as the next attempt
      while `max_retries` allow, with the cause the first node announced
      (`announce_node_failure`), else this node's;
    - success, once every node has succeeded;
    - while the job is cancelling (or on a cancel), cancelled once every node that joined has
      finished.

    Only the node's row changes for a node `stopped` because the attempt ended elsewhere, or
    when the attempt is no longer the job's active one. With `lost_before` (the reaper),
    nothing changes unless the node's last heartbeat is older.
    """
    job = lock_job(session, job_id)
    row = session.get(JobNode, (job_id, attempt, node), populate_existing=True)
    if (
        row is None
        or row.finished_at is not None
        or (lost_before is not None and row.last_heartbeat >= lost_before)
    ):
        session.rollback()
        return AttemptEnd()
    row.state, row.finished_at, row.exit_code = state, utcnow(), exit_code
    if row.failed_at is None:
        row.exit_reason, row.message = exit_reason, message
    session.add(row)
    session.flush()
    if (
        state is NodeState.STOPPED
        or job is None
        or job.attempt != attempt
        or JobState(job.state) not in ACTIVE_STATES
    ):
        session.commit()
        return AttemptEnd()
    end = _end_of_attempt(session, job, row, state, exit_reason)
    session.commit()
    if end.retried is not None:
        session.refresh(end.retried)
    return end


def lose_unjoined_node(
    session: Session, job_id: str, attempt: int, node: int, *, worker: str, message: str
) -> AttemptEnd:
    """Node `node` of a started attempt was admitted onto `worker`, which went away before it
    joined (committed): the node fails as `worker_lost`, which ends the attempt (retried
    while `max_retries` allow) as `finish_node` does; the nodes that joined see it over and
    stop, instead of waiting for it until the rendezvous times out. Nothing changes once the
    node has joined (the reaper follows its heartbeat then), or when the attempt is no longer
    the job's active one, or is cancelling (it ends when the nodes that joined finish)."""
    job = lock_job(session, job_id)
    nnodes = 0 if job is None else job.job_spec().nnodes
    if (
        job is None
        or job.attempt != attempt
        or job.state not in (JobState.STARTING, JobState.RUNNING)
        or nnodes < 2
        or not 0 <= node < nnodes
        or session.get(JobNode, (job_id, attempt, node)) is not None
    ):
        session.rollback()
        return AttemptEnd()
    now = utcnow()
    row = JobNode(
        job_id=job_id,
        attempt=attempt,
        node=node,
        worker=worker,
        host=worker.rpartition(":")[0] or worker,  # a worker's name is host:pid
        state=NodeState.FAILED,
        joined_at=now,
        last_heartbeat=now,
        finished_at=now,
        exit_reason=ExitReason.WORKER_LOST,
        message=message,
    )
    session.add(row)
    session.flush()
    end = _end_of_attempt(session, job, row, NodeState.FAILED, ExitReason.WORKER_LOST)
    session.commit()
    if end.retried is not None:
        session.refresh(end.retried)
    return end


def _end_of_attempt(
    session: Session, job: Job, row: JobNode, state: NodeState, exit_reason: ExitReason | None
) -> AttemptEnd:
    """What node `row` ending in `state` does to its attempt, given every node of it."""
    nodes = list(
        session.exec(
            select(JobNode).where(JobNode.job_id == job.id, JobNode.attempt == row.attempt)
        ).all()
    )
    if job.state == JobState.CANCELLING or state is NodeState.CANCELLED:
        if not all(n.finished_at is not None for n in nodes):
            return AttemptEnd()
        return end_attempt(
            session,
            job.id,
            row.attempt,
            JobState.CANCELLED,
            exit_reason=ExitReason.CANCELLED,
            message="cancelled on request",
        )
    if state is NodeState.SUCCEEDED:
        everyone = len(nodes) == job.job_spec().nnodes
        if not everyone or any(n.state != NodeState.SUCCEEDED for n in nodes):
            return AttemptEnd()
        return end_attempt(
            session,
            job.id,
            row.attempt,
            JobState.SUCCEEDED,
            exit_code=0,
            exit_reason=ExitReason.COMPLETED,
        )
    announced = sorted((n for n in nodes if n.failed_at is not None), key=_failed_at)
    cause = announced[0] if announced else row
    reason = ExitReason(cause.exit_reason or exit_reason or ExitReason.USER_ERROR)
    text = f"node {cause.node} (worker {cause.worker}): {cause.message or reason}"
    return end_attempt(
        session,
        job.id,
        row.attempt,
        JobState.FAILED,
        exit_code=cause.exit_code,
        exit_reason=reason,
        message=text,
    )


def _failed_at(node: JobNode) -> datetime:
    assert node.failed_at is not None
    return node.failed_at


def find_lost_nodes(session: Session, lost_before: datetime, limit: int = 100) -> list[JobNode]:
    """Unfinished nodes of the active attempts of multi-node jobs, with no heartbeat since
    `lost_before`."""
    stmt = (
        select(JobNode)
        .join(Job, (col(Job.id) == col(JobNode.job_id)) & (col(Job.attempt) == JobNode.attempt))
        .where(
            col(Job.state).in_(ACTIVE_STATES),
            col(JobNode.finished_at).is_(None),
            col(JobNode.last_heartbeat) < lost_before,
        )
        .limit(limit)
    )
    return list(session.exec(stmt).all())


def list_nodes(session: Session, job_id: str) -> list[JobNode]:
    """The nodes of every attempt of a job, by attempt and node."""
    stmt = (
        select(JobNode)
        .where(JobNode.job_id == job_id)
        .order_by(col(JobNode.attempt), col(JobNode.node))
    )
    return list(session.exec(stmt).all())
