"""Reads and writes of jobs and what they produce, shared by the service and the worker.

State changes are conditional updates (`UPDATE job ... WHERE state IN (<sources>)`), so a
repeated, late or racing change does no harm: it simply matches no row and returns False.
What a worker writes for an attempt (metrics, logs, checkpoints, heartbeats) is likewise
conditional on the job still being active at that attempt; see `AttemptSuperseded`.
"""

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, update
from sqlmodel import Session, col, select

from jobs.spec import JobSpec
from jobs.states import ACTIVE_STATES, ExitReason, JobState, NodeState, states_that_can_become
from service.models import Checkpoint, Job, JobEvent, JobNode, LogLine, MetricPoint, utcnow

# Worker-side failures that retry the job while `max_retries` allow (docs/reliability.md):
# all but a cancel, a timeout (it would only time out again) and a launch error (the spec or
# the worker cannot run it; retrying changes nothing).
RETRYABLE_EXIT_REASONS = frozenset(
    {
        ExitReason.USER_ERROR,
        ExitReason.OOM,
        ExitReason.HANG,
        ExitReason.WORKER_LOST,
        ExitReason.RENDEZVOUS_TIMEOUT,
    }
)


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


def _active_at(job_id: str, attempt: int) -> tuple[ColumnElement[bool], ...]:
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
    conditions = _active_at(job_id, attempt) if attempt is not None else (col(Job.id) == job_id,)
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
    _insert_state_event(session, job.id, JobState.QUEUED, job.attempt, 1, {})
    session.commit()
    return job


def find_job_by_idempotency_key(session: Session, owner: str, key: str) -> Job | None:
    stmt = select(Job).where(Job.owner == owner, Job.idempotency_key == key)
    return session.exec(stmt).first()


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
    moved = _transition(session, job_id, target, attempt=attempt, lost_before=lost_before, **fields)
    if moved:
        session.commit()
    else:
        session.rollback()
    return moved


def take_job(session: Session, job_id: str, attempt: int, **fields: Any) -> dict[str, Any] | None:
    """Move the job `queued → starting` at `attempt` (committed) and return its spec; None,
    having changed nothing, when it is not queued at that attempt any more."""
    moved = _move(session, job_id, JobState.STARTING, attempt, None, fields, col(Job.spec))
    if moved is None:
        session.rollback()
        return None
    session.commit()
    return dict(moved.spec)


def _transition(
    session: Session,
    job_id: str,
    target: JobState,
    *,
    attempt: int | None = None,
    lost_before: datetime | None = None,
    **fields: Any,
) -> bool:
    """`transition_job` without the commit (or the rollback when nothing moved)."""
    return _move(session, job_id, target, attempt, lost_before, fields) is not None


def _move(
    session: Session,
    job_id: str,
    target: JobState,
    attempt: int | None,
    lost_before: datetime | None,
    fields: dict[str, Any],
    *returning: Any,
) -> Any:
    """One conditional UPDATE of the job's row, which also takes the state event's seq, then
    the event. Returns the updated row (its `attempt`, `last_seq` and `returning` columns) or
    None."""
    values: dict[str, Any] = {"state": target, "last_seq": col(Job.last_seq) + 1, **fields}
    if target.is_terminal():
        values.setdefault("finished_at", utcnow())
    stmt = update(JOB_TABLE).where(
        col(Job.id) == job_id, col(Job.state).in_(states_that_can_become(target))
    )
    if attempt is not None:
        stmt = stmt.where(col(Job.attempt) == attempt)
    if lost_before is not None:
        stmt = stmt.where(last_sign_of_life() < lost_before)
    returned = (col(Job.attempt), col(Job.last_seq), *returning)
    row = session.execute(stmt.values(**values).returning(*returned)).one_or_none()
    if row is None:
        return None
    detail: dict[str, Any] = {
        k: fields[k] for k in ("exit_code", "exit_reason", "message", "worker") if k in fields
    }
    _insert_state_event(session, job_id, target, int(row.attempt), int(row.last_seq), detail)
    return row


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
    has shown no sign of life since). Returns the job, for the caller to enqueue now that it is
    committed; None, having changed nothing, otherwise (the caller then fails the job).
    """
    job = _requeue(
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


def _requeue(
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
    max_retries = int(job.spec.get("max_retries") or 0)
    if attempt > max_retries:
        return None
    stmt = update(Job).where(
        col(Job.id) == job_id,
        col(Job.attempt) == attempt,
        col(Job.state).in_([JobState.STARTING, JobState.RUNNING]),
    )
    if lost_before is not None:
        stmt = stmt.where(last_sign_of_life() < lost_before)
    note = f"retry {attempt} of {max_retries}: attempt {attempt} ended with {exit_reason}"
    values = {
        "state": JobState.QUEUED,
        "attempt": attempt + 1,
        "started_at": None,
        "finished_at": None,
        "last_heartbeat": None,
        "worker": None,
        "exit_code": None,
        "exit_reason": None,
        "message": f"{note}: {message}" if message else note,
        "last_seq": col(Job.last_seq) + 1,  # the `queued` event's
    }
    seq = session.execute(stmt.values(**values).returning(col(Job.last_seq))).scalar_one_or_none()
    if seq is None:
        return None
    detail = {
        "retry_of": attempt,
        "exit_code": exit_code,
        "exit_reason": str(exit_reason),
        "message": message,
    }
    _insert_state_event(session, job_id, JobState.QUEUED, attempt + 1, int(seq), detail)
    return job


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


def queued_since(session: Session, job_id: str, attempt: int) -> float | None:
    """When the job's attempt `attempt` was queued (Unix seconds), from its state events."""
    stmt = select(func.max(JobEvent.ts)).where(
        JobEvent.job_id == job_id, JobEvent.kind == "state", JobEvent.attempt == attempt
    )
    value = session.exec(stmt).one()
    return None if value is None else float(value)


def _insert_state_event(
    session: Session, job_id: str, state: JobState, attempt: int, seq: int, detail: dict[str, Any]
) -> None:
    row = {
        "job_id": job_id,
        "seq": seq,
        "kind": "state",
        "attempt": attempt,
        "ts": time.time(),
        "data": {"state": str(state), **detail},
    }
    session.execute(insert(JobEvent.__table__).values(**row))  # type: ignore[attr-defined]


def add_attempt_event(
    session: Session, job_id: str, kind: str, attempt: int, data: dict[str, Any]
) -> None:
    """Record a non-state event of a worker's attempt (e.g. an elastic restart) and commit;
    AttemptSuperseded, writing nothing, unless the job is active at `attempt`."""
    seq = allocate_seq(session, job_id, attempt=attempt)
    session.add(
        JobEvent(job_id=job_id, seq=seq, kind=kind, attempt=attempt, ts=time.time(), data=data)
    )
    session.commit()


@dataclass(frozen=True)
class NewLogLine:
    rank: int
    ts: float
    line: str
    node: int = 0


def append_log_lines(
    session: Session, job_id: str, attempt: int, lines: Sequence[NewLogLine]
) -> None:
    append_output(session, job_id, attempt, logs=lines)


@dataclass(frozen=True)
class NewMetricPoint:
    step: int | None
    epoch: int | None
    name: str
    value: float
    ts: float


def append_metric_points(
    session: Session,
    job_id: str,
    attempt: int,
    points: Sequence[NewMetricPoint],
    *,
    progress: dict[str, Any] | None = None,
) -> None:
    append_output(session, job_id, attempt, points=points, progress=progress)


def append_output(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    logs: Sequence[NewLogLine] = (),
    points: Sequence[NewMetricPoint] = (),
    progress: dict[str, Any] | None = None,
) -> None:
    """Insert log lines and metric points in one transaction (bulk inserts: the worker calls
    this several times a second beside busy ranks) and move the job's progress and latest
    values forward. `progress` holds other Job columns to set (e.g. total_steps).

    AttemptSuperseded, writing nothing, unless the job is active at `attempt`."""
    if not logs and not points:
        return
    first = allocate_seq(session, job_id, len(logs) + len(points), attempt=attempt)
    if logs:
        session.execute(
            insert(LogLine),
            [
                {
                    "job_id": job_id,
                    "seq": first + i,
                    "attempt": attempt,
                    "rank": ln.rank,
                    "node": ln.node,
                    "ts": ln.ts,
                    "line": ln.line,
                }
                for i, ln in enumerate(logs)
            ],
        )
    if points:
        first += len(logs)
        session.execute(
            insert(MetricPoint),
            [
                {
                    "job_id": job_id,
                    "seq": first + i,
                    "attempt": attempt,
                    "step": p.step,
                    "epoch": p.epoch,
                    "name": p.name,
                    "value": p.value,
                    "ts": p.ts,
                }
                for i, p in enumerate(points)
            ],
        )
        latest = session.exec(select(Job.latest_metrics).where(Job.id == job_id)).one()
        values: dict[str, Any] = {
            "latest_metrics": {**(latest or {}), **{p.name: p.value for p in points}},
            **(progress or {}),
        }
        last = points[-1]
        if last.step is not None:
            values["progress_step"] = last.step
        if last.epoch is not None:
            values["progress_epoch"] = last.epoch
        session.execute(update(JOB_TABLE).where(col(Job.id) == job_id).values(**values))
    session.commit()


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
        .where(*_active_at(job_id, attempt))
        .values(last_heartbeat=utcnow())
        .returning(col(Job.state))
    )
    state = session.execute(stmt).scalar_one_or_none()
    if state is not None and node is not None:
        session.execute(
            update(JobNode)
            .where(*_node_key(job_id, attempt, node), col(JobNode.finished_at).is_(None))
            .values(last_heartbeat=utcnow())
        )
    session.commit()
    return None if state is None else JobState(state)


# Multi-node jobs (`nnodes` > 1): each node's task joins the attempt, and the attempt ends as a
# whole (docs/multi-node.md).


@dataclass(frozen=True)
class NodeSeat:
    """What a node that joined an attempt runs with: the rendezvous endpoint (`host:port`),
    whether this node hosts it, and the job's spec."""

    endpoint: str
    is_host: bool
    spec: dict[str, Any]


@dataclass(frozen=True)
class NodeEnd:
    """What `finish_node` did: whether it ended the attempt (the job's state changed), and the
    job queued again as its next attempt, for the caller to enqueue."""

    recorded: bool = False
    retried: Job | None = None


def _node_key(job_id: str, attempt: int, node: int) -> tuple[ColumnElement[bool], ...]:
    return (
        col(JobNode.job_id) == job_id,
        col(JobNode.attempt) == attempt,
        col(JobNode.node) == node,
    )


def _lock_job(session: Session, job_id: str) -> Job | None:
    """The job's row, locked until commit: whoever changes the nodes of an attempt takes it
    first, so their decisions (who hosts, who finishes last) are made one at a time. A no-op
    UPDATE, because SQLite has no SELECT ... FOR UPDATE (an UPDATE takes its write lock)."""
    session.execute(update(Job).where(col(Job.id) == job_id).values(last_seq=Job.last_seq))
    stmt = select(Job).where(Job.id == job_id).execution_options(populate_existing=True)
    return session.exec(stmt).first()


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
    job = _lock_job(session, job_id)
    if (
        job is None
        or job.attempt != attempt
        or job.state not in (JobState.QUEUED, JobState.STARTING)
        or not 0 <= node < int(job.spec.get("nnodes") or 1)
        or session.get(JobNode, (job_id, attempt, node)) is not None
    ):
        session.rollback()
        return None
    now = utcnow()
    hosting = job.state == JobState.QUEUED
    if hosting and not _transition(
        session,
        job_id,
        JobState.STARTING,
        attempt=attempt,
        worker=worker,
        started_at=now,
        last_heartbeat=now,
    ):
        session.rollback()
        return None
    if not hosting:
        hosted_at = session.exec(
            select(JobNode.endpoint).where(
                JobNode.job_id == job_id,
                JobNode.attempt == attempt,
                col(JobNode.endpoint).is_not(None),
            )
        ).first()
        if hosted_at is None:
            session.rollback()
            return None
        endpoint = hosted_at
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
    spec = dict(job.spec)
    session.commit()
    return NodeSeat(endpoint=endpoint, is_host=hosting, spec=spec)


def mark_node_running(session: Session, job_id: str, attempt: int, node: int) -> None:
    """The node's ranks have started (committed)."""
    session.execute(
        update(JobNode)
        .where(*_node_key(job_id, attempt, node), col(JobNode.state) == NodeState.STARTING)
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
            *_node_key(job_id, attempt, node),
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
) -> NodeEnd:
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
    job = _lock_job(session, job_id)
    row = session.get(JobNode, (job_id, attempt, node), populate_existing=True)
    if (
        row is None
        or row.finished_at is not None
        or (lost_before is not None and row.last_heartbeat >= lost_before)
    ):
        session.rollback()
        return NodeEnd()
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
        return NodeEnd()
    nodes = list(
        session.exec(
            select(JobNode).where(JobNode.job_id == job_id, JobNode.attempt == attempt)
        ).all()
    )
    retried: Job | None = None
    if job.state == JobState.CANCELLING or state is NodeState.CANCELLED:
        finished = all(n.finished_at is not None for n in nodes)
        recorded = finished and _cancel_attempt(session, job_id, attempt)
    elif state is NodeState.SUCCEEDED:
        everyone = len(nodes) == int(job.spec.get("nnodes") or 1)
        recorded = (
            everyone
            and all(n.state == NodeState.SUCCEEDED for n in nodes)
            and _transition(
                session,
                job_id,
                JobState.SUCCEEDED,
                attempt=attempt,
                exit_code=0,
                exit_reason=ExitReason.COMPLETED,
            )
        )
    else:
        announced = sorted((n for n in nodes if n.failed_at is not None), key=_failed_at)
        cause = announced[0] if announced else row
        reason = ExitReason(cause.exit_reason or exit_reason or ExitReason.USER_ERROR)
        text = f"node {cause.node} (worker {cause.worker}): {cause.message or reason}"
        retried = _requeue(
            session, job_id, attempt, exit_reason=reason, exit_code=cause.exit_code, message=text
        )
        recorded = retried is not None or _transition(
            session,
            job_id,
            JobState.FAILED,
            attempt=attempt,
            exit_code=cause.exit_code,
            exit_reason=reason,
            message=text,
        )
    session.commit()
    if retried is not None:
        session.refresh(retried)
    return NodeEnd(recorded=recorded, retried=retried)


def _failed_at(node: JobNode) -> datetime:
    assert node.failed_at is not None
    return node.failed_at


def _cancel_attempt(session: Session, job_id: str, attempt: int) -> bool:
    _transition(session, job_id, JobState.CANCELLING, attempt=attempt)
    return _transition(
        session,
        job_id,
        JobState.CANCELLED,
        attempt=attempt,
        exit_reason=ExitReason.CANCELLED,
        message="cancelled on request",
    )


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


def register_checkpoint(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    path: str,
    step: int | None,
    epoch: int | None,
    metrics: dict[str, float],
    size: int,
    sha256: str,
) -> Checkpoint:
    """Insert a verified checkpoint file (`path` relative to the data dir) and commit.

    A file saved again under the same name replaces the row of its earlier version.
    AttemptSuperseded, writing nothing, unless the job is active at `attempt`.
    """
    # First: the job row lock orders every writer alike.
    seq = allocate_seq(session, job_id, attempt=attempt)
    session.execute(
        delete(Checkpoint).where(col(Checkpoint.job_id) == job_id, col(Checkpoint.path) == path)
    )
    checkpoint = Checkpoint(
        id=new_id(),
        job_id=job_id,
        seq=seq,
        attempt=attempt,
        step=step,
        epoch=epoch,
        metrics=metrics,
        size=size,
        sha256=sha256,
        path=path,
        created_at=utcnow(),
    )
    session.add(checkpoint)
    session.commit()
    return checkpoint


def delete_checkpoints(session: Session, job_id: str, checkpoint_ids: Sequence[str]) -> None:
    """Remove checkpoint rows of a job (their files are the caller's) and commit."""
    if not checkpoint_ids:
        return
    session.execute(
        delete(Checkpoint).where(
            col(Checkpoint.job_id) == job_id, col(Checkpoint.id).in_(list(checkpoint_ids))
        )
    )
    session.commit()


def list_jobs(
    session: Session,
    *,
    owner: str | None,
    state: JobState | None,
    limit: int,
    offset: int,
) -> tuple[list[Job], int]:
    """Jobs newest first, and how many match in all. `owner=None` means every owner."""
    conditions = []
    if owner is not None:
        conditions.append(col(Job.owner) == owner)
    if state is not None:
        conditions.append(col(Job.state) == state)
    total = session.exec(select(func.count()).select_from(Job).where(*conditions)).one()
    stmt = (
        select(Job)
        .where(*conditions)
        .order_by(col(Job.created_at).desc(), col(Job.id).desc())
        .offset(offset)
        .limit(limit)
    )
    return list(session.exec(stmt).all()), int(total)


def list_log_lines(
    session: Session,
    job_id: str,
    *,
    rank: int | None,
    after: int,
    limit: int,
    node: int | None = None,
) -> list[LogLine]:
    stmt = select(LogLine).where(LogLine.job_id == job_id, col(LogLine.seq) > after)
    if rank is not None:
        stmt = stmt.where(LogLine.rank == rank)
    if node is not None:
        stmt = stmt.where(LogLine.node == node)
    return list(session.exec(stmt.order_by(col(LogLine.seq)).limit(limit)).all())


def list_metric_points(
    session: Session, job_id: str, *, name: str | None, after: int, limit: int
) -> list[MetricPoint]:
    stmt = select(MetricPoint).where(MetricPoint.job_id == job_id, col(MetricPoint.seq) > after)
    if name is not None:
        stmt = stmt.where(MetricPoint.name == name)
    return list(session.exec(stmt.order_by(col(MetricPoint.seq)).limit(limit)).all())


def list_checkpoints(session: Session, job_id: str) -> list[Checkpoint]:
    stmt = select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(col(Checkpoint.seq))
    return list(session.exec(stmt).all())


def delete_job_rows(session: Session, job_id: str) -> None:
    """Remove a job and every row it produced, in one transaction."""
    tables: Iterable[Any] = (JobEvent, MetricPoint, LogLine, Checkpoint, JobNode)
    for table in tables:
        session.execute(delete(table).where(col(table.job_id) == job_id))
    session.execute(delete(Job).where(col(Job.id) == job_id))
    session.commit()


StreamRow = JobEvent | MetricPoint | LogLine | Checkpoint


@dataclass(frozen=True)
class StreamRead:
    """Rows with `after < seq <= cursor` in seq order, and whether the job had ended when
    read (then an empty read means nothing more will come)."""

    rows: list[StreamRow]
    cursor: int
    ended: bool


def read_stream(session: Session, job_id: str, *, after: int, window: int = 500) -> StreamRead:
    """What a job recorded after `after` (at most `window` seqs): its live stream.

    Every seq up to the job's `last_seq` is committed once `last_seq` is visible (they are
    written in one transaction), so reading up to it leaves no gap a later read could fill.
    LookupError when the job no longer exists.
    """
    found = session.exec(select(Job.last_seq, Job.state).where(Job.id == job_id)).first()
    if found is None:
        raise LookupError(f"job {job_id} no longer exists")
    last_seq, state = found
    ended = JobState(state).is_terminal()
    if last_seq <= after:
        return StreamRead([], after, ended)
    upper = min(int(last_seq), after + window)
    rows: list[StreamRow] = []
    tables: tuple[Any, ...] = (JobEvent, MetricPoint, LogLine, Checkpoint)
    for table in tables:
        stmt = select(table).where(
            col(table.job_id) == job_id, col(table.seq) > after, col(table.seq) <= upper
        )
        rows.extend(session.exec(stmt).all())
    rows.sort(key=lambda row: row.seq)
    return StreamRead(rows, upper, ended)
