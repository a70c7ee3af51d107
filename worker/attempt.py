"""One attempt of a job, from `queued` to its end: take it, prepare and launch it, have it
monitored (`worker.monitor`) with its heartbeat beside (`worker.heartbeat`), and record how it
ended: a failure whose exit reason is retried, while the spec's `max_retries` allow, puts the
job back to `queued` as the next attempt and enqueues it (`service.store.requeue_job`).

Every state change is conditional (`service.store.transition_job` with the attempt), so an
attempt that was cancelled while queued, taken by someone else or retried is left alone.

A multi-node job (`nnodes` > 1) runs as one task per node (`node`): each joins the attempt
(`service.store.join_node`; the first hosts torch's c10d rendezvous), runs its share of the
ranks, and records how it ended with `service.store.finish_node`, which ends the attempt as a
whole: at the first failure, or once every node has succeeded (docs/multi-node.md).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import Engine

from jobs.states import ExitReason, JobState, NodeState
from service.db import session_scope
from service.models import Job, utcnow
from service.queue import cancel_key, enqueue_attempt, heartbeat_key
from service.settings import Settings
from service.store import (
    NodeSeat,
    announce_node_failure,
    finish_node,
    join_node,
    requeue_job,
    take_job,
    transition_job,
)
from worker.disk import record_job_disk_use
from worker.heartbeat import AttemptHeartbeat
from worker.isolation import JobUser, isolate_attempt
from worker.launch import Rendezvous, RunPaths
from worker.monitor import AttemptMonitor, retry_db
from worker.orphans import leave_note, remove_note
from worker.outcome import Outcome
from worker.prepare import (
    CudaInfo,
    LaunchProblem,
    detect_cuda,
    free_port,
    parse_spec,
    prepare_attempt,
)
from worker.supervise import ProcessRecord

log = logging.getLogger(__name__)


@dataclass
class AttemptResult:
    """What happened, for the caller and for tests: the outcome and whether it was recorded."""

    job_id: str
    attempt: int
    paths: RunPaths
    node: int | None = None
    outcome: Outcome | None = None
    recorded: bool = False
    # The job was put back to `queued` as attempt + 1 instead of failing.
    retried: bool = False
    processes: list[ProcessRecord] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)


def record_outcome(
    engine: Engine,
    job_id: str,
    attempt: int,
    outcome: Outcome,
    *,
    redis: Redis | None = None,
    settings: Settings | None = None,
) -> tuple[bool, bool]:
    """Move the job to the outcome's state (conditionally), or retry it: (recorded, retried);
    recorded is False when the job was no longer ours. A failure is retried only given
    `redis` and `settings`, to enqueue the new attempt."""
    fields: dict[str, Any] = {
        "exit_code": outcome.exit_code,
        "exit_reason": str(outcome.reason),
        "message": outcome.message,
    }
    may_retry = outcome.state is JobState.FAILED and redis is not None and settings is not None

    def write() -> tuple[bool, Job | None]:
        with session_scope(engine) as session:
            if may_retry:
                retried = requeue_job(
                    session,
                    job_id,
                    attempt,
                    exit_reason=outcome.reason,
                    exit_code=outcome.exit_code,
                    message=outcome.message,
                )
                if retried is not None:
                    return True, retried
            if outcome.state is JobState.CANCELLED:
                # Normally the API has already moved a running job to cancelling.
                transition_job(session, job_id, JobState.CANCELLING, attempt=attempt)
            return transition_job(session, job_id, outcome.state, attempt=attempt, **fields), None

    return _write_outcome(write, f"recording the outcome of job {job_id}", redis, settings)


def record_node_outcome(
    engine: Engine,
    job_id: str,
    attempt: int,
    node: int,
    outcome: Outcome | None,
    *,
    redis: Redis,
    settings: Settings,
) -> tuple[bool, bool]:
    """`record_outcome` for a node of a multi-node job (`service.store.finish_node`): the job
    changes only when this decides the attempt. `outcome` None: the node was stopped because
    the attempt ended elsewhere."""

    def write() -> tuple[bool, Job | None]:
        with session_scope(engine) as session:
            if outcome is None:
                end = finish_node(session, job_id, attempt, node, state=NodeState.STOPPED)
            else:
                end = finish_node(
                    session,
                    job_id,
                    attempt,
                    node,
                    state=NodeState(outcome.state),
                    exit_reason=outcome.reason,
                    exit_code=outcome.exit_code,
                    message=outcome.message,
                )
            return end.recorded, end.retried

    return _write_outcome(
        write, f"recording how node {node} of job {job_id} ended", redis, settings
    )


def _write_outcome(
    write: Callable[[], tuple[bool, Job | None]],
    what: str,
    redis: Redis | None,
    settings: Settings | None,
) -> tuple[bool, bool]:
    """Run `write` (retried while the database is away): (recorded, retried); a job it queued
    again as its next attempt is enqueued."""
    written = retry_db(write, what)
    if written is None:
        return False, False
    recorded, retried = written
    if retried is not None and redis is not None and settings is not None:
        log.info("job %s: attempt %d failed; retrying", retried.id, retried.attempt - 1)
        try:
            enqueue_attempt(redis, retried, grace_s=settings.cancel_grace_s)
        except RedisError as exc:
            # Queued without a queue entry: the reaper enqueues it.
            log.warning("job %s: retry not enqueued (the reaper will): %s", retried.id, exc)
    return recorded, retried is not None


def _with_notes(outcome: Outcome, notes: str | None) -> Outcome:
    if not notes:
        return outcome
    message = f"{outcome.message}\n({notes})" if outcome.message else notes
    return Outcome(outcome.state, outcome.reason, outcome.exit_code, message)


@dataclass(frozen=True)
class TakenAttempt:
    """An attempt this worker has taken (a node it has joined): what running it needs."""

    job_id: str
    attempt: int
    node: int | None
    worker_name: str
    spec: dict[str, Any]
    rendezvous: Rendezvous | None


def run_attempt(
    engine: Engine,
    redis: Redis,
    settings: Settings,
    job_id: str,
    attempt: int,
    *,
    worker_name: str,
    node: int | None = None,
    cuda: CudaInfo | None = None,
) -> AttemptResult | None:
    """Take attempt `attempt` of job `job_id` (join it as node `node`, for a multi-node job),
    run it to its end and record how it ended (`take_attempt`, then `run_taken`).

    Returns None, having done nothing, when the job is not `queued` at that attempt any more
    (cancelled while queued, or taken by another worker), or the node cannot join it.
    """
    taken = take_attempt(engine, settings, job_id, attempt, node=node, worker_name=worker_name)
    if taken is None:
        return None
    return run_taken(engine, redis, settings, taken, cuda=cuda)


def take_attempt(
    engine: Engine,
    settings: Settings,
    job_id: str,
    attempt: int,
    *,
    node: int | None,
    worker_name: str,
) -> TakenAttempt | None:
    """Take the attempt (queued → starting), or join it as node `node`; None, having changed
    nothing, when it is not to be run. The worker does this before it forks the work horse
    that runs the attempt (`worker.main`), with its own warm database connection."""
    now = utcnow()
    seat: NodeSeat | None = None
    with session_scope(engine) as session:
        if node is None:
            spec = take_job(
                session, job_id, attempt, worker=worker_name, started_at=now, last_heartbeat=now
            )
        else:
            host = settings.worker_host
            seat = join_node(
                session,
                job_id,
                attempt,
                node,
                worker=worker_name,
                host=host,
                endpoint=f"{host}:{free_port('')}",
            )
            spec = seat.spec if seat is not None else None
    if spec is None:
        log.info(
            "job %s attempt %d node %s: not to be run any more; skipped", job_id, attempt, node
        )
        return None
    if seat is None or node is None:
        return TakenAttempt(job_id, attempt, None, worker_name, spec, None)
    rendezvous = Rendezvous(
        endpoint=seat.endpoint,
        is_host=seat.is_host,
        local_addr=settings.worker_host,
        timeout_s=seat.spec.get("rendezvous_timeout_s") or settings.rendezvous_timeout_s,
        node=node,
    )
    return TakenAttempt(job_id, attempt, node, worker_name, seat.spec, rendezvous)


def run_taken(
    engine: Engine,
    redis: Redis,
    settings: Settings,
    taken: TakenAttempt,
    *,
    cuda: CudaInfo | None = None,
) -> AttemptResult:
    """Run a taken attempt to its end and record how it ended."""
    job_id, attempt, node, worker_name = taken.job_id, taken.attempt, taken.node, taken.worker_name
    paths = RunPaths.for_attempt(settings.data_dir.resolve(), job_id, attempt, node)
    result = AttemptResult(job_id, attempt, paths, node)
    heartbeat = AttemptHeartbeat(
        engine,
        redis,
        job_id=job_id,
        attempt=attempt,
        worker_name=worker_name,
        interval_s=settings.heartbeat_interval_s,
        node=node,
    ).start()
    try:
        _run(engine, redis, settings, result, taken, heartbeat, cuda)
        if node is not None:
            result.recorded, result.retried = record_node_outcome(
                engine, job_id, attempt, node, result.outcome, redis=redis, settings=settings
            )
            if result.recorded:
                _forget_keys(redis, job_id)
            return result
        if result.outcome is None:
            return result  # taken away: its keys may be a later attempt's now
        _forget_keys(redis, job_id)
        result.recorded, result.retried = record_outcome(
            engine, job_id, attempt, result.outcome, redis=redis, settings=settings
        )
        if not result.recorded:
            log.warning(
                "job %s was moved by someone else; outcome %s not recorded", job_id, result.outcome
            )
    finally:
        heartbeat.stop()
        record_job_disk_use(engine, job_id, paths.data_dir)
        if not result.survivors:
            remove_note(paths.data_dir, job_id, attempt, node)
    return result


def abandon(engine: Engine, redis: Redis, settings: Settings, taken: TakenAttempt) -> None:
    """Give up an attempt taken but never started, because the worker is shutting down: it
    ends as `worker_lost` (retried while `max_retries` allow), like one stopped mid-run."""
    message = f"worker {taken.worker_name} shut down before the job started"
    _record_lost(engine, redis, settings, taken.job_id, taken.attempt, taken.node, message)


def _record_lost(
    engine: Engine,
    redis: Redis,
    settings: Settings,
    job_id: str,
    attempt: int,
    node: int | None,
    message: str,
) -> None:
    lost = Outcome(JobState.FAILED, ExitReason.WORKER_LOST, None, message)
    if node is None:
        record_outcome(engine, job_id, attempt, lost, redis=redis, settings=settings)
    else:
        record_node_outcome(engine, job_id, attempt, node, lost, redis=redis, settings=settings)


def _run(
    engine: Engine,
    redis: Redis,
    settings: Settings,
    result: AttemptResult,
    taken: TakenAttempt,
    heartbeat: AttemptHeartbeat,
    cuda: CudaInfo | None,
) -> None:
    """Prepare, launch and monitor the attempt; its outcome (or None) goes into `result`."""
    job_id, attempt, paths, node = result.job_id, result.attempt, result.paths, result.node
    job_user: JobUser | None = None
    try:
        spec = parse_spec(taken.spec)
        plan = prepare_attempt(
            engine,
            spec=spec,
            job_id=job_id,
            attempt=attempt,
            paths=paths,
            code_store=settings.code_dir,
            cuda=cuda or detect_cuda(),
            collective_timeout_s=settings.collective_timeout_s,
            rendezvous=taken.rendezvous,
        )
        job_user = isolate_attempt(
            paths, job_id, pool_size=settings.job_users, lease_dir=settings.job_user_lease_dir
        )
        if job_user is not None:
            plan = replace(plan, env={**plan.env, **job_user.env(paths)})
        leave_note(paths.data_dir, job_id, attempt, paths.pids_file, node)
        monitor = AttemptMonitor(
            engine,
            redis,
            settings,
            job_id=job_id,
            attempt=attempt,
            spec=spec,
            plan=plan,
            paths=paths,
            worker_name=taken.worker_name,
            heartbeat=heartbeat,
            rendezvous=taken.rendezvous,
            announce=None if node is None else _announcer(engine, result),
            job_user=job_user,
        )
        result.outcome, result.survivors = monitor.run()
        if monitor.tree is not None:
            result.processes = list(monitor.tree.records.values())
        if result.outcome is not None:
            result.outcome = _with_notes(result.outcome, monitor.notes())
    except LaunchProblem as exc:
        result.outcome = Outcome(JobState.FAILED, ExitReason.LAUNCH_ERROR, None, str(exc))
    except BaseException as exc:
        message = f"the worker failed while supervising the job: {type(exc).__name__}: {exc}"
        _record_lost(engine, redis, settings, job_id, attempt, node, message)
        raise
    finally:
        if job_user is not None:
            job_user.release()


def _announcer(engine: Engine, result: AttemptResult) -> Callable[[Outcome], None]:
    """What a node of a multi-node job calls before it stops its processes for a failure."""
    job_id, attempt, node = result.job_id, result.attempt, result.node
    assert node is not None

    def announce(outcome: Outcome) -> None:
        def write() -> None:
            with session_scope(engine) as session:
                announce_node_failure(
                    session,
                    job_id,
                    attempt,
                    node,
                    exit_reason=outcome.reason,
                    message=outcome.message or str(outcome.reason),
                )

        retry_db(write, f"announcing the failure of node {node} of job {job_id}", tries=2)

    return announce


def _forget_keys(redis: Redis, job_id: str) -> None:
    try:
        redis.delete(cancel_key(job_id), heartbeat_key(job_id))
    except RedisError:
        log.warning("job %s: could not delete its Redis keys", job_id, exc_info=True)
