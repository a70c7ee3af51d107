"""One attempt of a job, from `queued` to its end: take it, prepare and launch it, have it
monitored (`worker.monitor`) with its heartbeat beside (`worker.heartbeat`), and record how it
ended: a failure whose exit reason is retried, while the spec's `max_retries` allow, puts the
job back to `queued` as the next attempt and enqueues it (`service.store.requeue_job`).

Every state change is conditional (`service.store.transition_job` with the attempt), so an
attempt that was cancelled while queued, taken by someone else or retried is left alone.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import Engine

from jobs.states import ExitReason, JobState
from service.db import session_scope
from service.models import Job, utcnow
from service.queue import cancel_key, enqueue_attempt, heartbeat_key
from service.settings import Settings
from service.store import requeue_job, transition_job
from worker.heartbeat import AttemptHeartbeat
from worker.launch import RunPaths
from worker.monitor import AttemptMonitor, retry_db
from worker.orphans import leave_note, remove_note
from worker.outcome import Outcome
from worker.prepare import CudaInfo, LaunchProblem, detect_cuda, parse_spec, prepare_attempt
from worker.supervise import ProcessRecord

log = logging.getLogger(__name__)


@dataclass
class AttemptResult:
    """What happened, for the caller and for tests: the outcome and whether it was recorded."""

    job_id: str
    attempt: int
    paths: RunPaths
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

    written = retry_db(write, f"recording the outcome of job {job_id}")
    if written is None:
        return False, False
    recorded, retried = written
    if retried is not None and redis is not None and settings is not None:
        log.info("job %s: attempt %d %s; retrying", job_id, attempt, outcome.reason)
        try:
            enqueue_attempt(redis, retried, grace_s=settings.cancel_grace_s)
        except RedisError as exc:
            # Queued without a queue entry: the reaper enqueues it.
            log.warning("job %s: retry not enqueued (the reaper will): %s", job_id, exc)
    return recorded, retried is not None


def _with_notes(outcome: Outcome, notes: str | None) -> Outcome:
    if not notes:
        return outcome
    message = f"{outcome.message}\n({notes})" if outcome.message else notes
    return Outcome(outcome.state, outcome.reason, outcome.exit_code, message)


def run_attempt(
    engine: Engine,
    redis: Redis,
    settings: Settings,
    job_id: str,
    attempt: int,
    *,
    worker_name: str,
    cuda: CudaInfo | None = None,
) -> AttemptResult | None:
    """Run attempt `attempt` of job `job_id` to its end and record how it ended.

    Returns None, having done nothing, when the job is not `queued` at that attempt any more
    (cancelled while queued, or taken by another worker).
    """
    with session_scope(engine) as session:
        now = utcnow()
        taken = transition_job(
            session,
            job_id,
            JobState.STARTING,
            attempt=attempt,
            worker=worker_name,
            started_at=now,
            last_heartbeat=now,
        )
        job = session.get(Job, job_id) if taken else None
        raw_spec = dict(job.spec) if job is not None else None
    if raw_spec is None:
        log.info("job %s attempt %d is not queued any more; skipped", job_id, attempt)
        return None
    paths = RunPaths.for_attempt(settings.data_dir.resolve(), job_id, attempt)
    result = AttemptResult(job_id, attempt, paths)
    heartbeat = AttemptHeartbeat(
        engine,
        redis,
        job_id=job_id,
        attempt=attempt,
        worker_name=worker_name,
        interval_s=settings.heartbeat_interval_s,
    ).start()
    try:
        _run(engine, redis, settings, result, raw_spec, heartbeat, worker_name, cuda)
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
        if not result.survivors:
            remove_note(paths.data_dir, job_id, attempt)
    return result


def _run(
    engine: Engine,
    redis: Redis,
    settings: Settings,
    result: AttemptResult,
    raw_spec: dict[str, object],
    heartbeat: AttemptHeartbeat,
    worker_name: str,
    cuda: CudaInfo | None,
) -> None:
    """Prepare, launch and monitor the attempt; its outcome (or None) goes into `result`."""
    job_id, attempt, paths = result.job_id, result.attempt, result.paths
    try:
        spec = parse_spec(raw_spec)
        plan = prepare_attempt(
            engine,
            spec=spec,
            job_id=job_id,
            attempt=attempt,
            paths=paths,
            code_store=settings.code_dir,
            cuda=cuda or detect_cuda(),
            collective_timeout_s=settings.collective_timeout_s,
        )
        leave_note(paths.data_dir, job_id, attempt, paths.pids_file)
        monitor = AttemptMonitor(
            engine,
            redis,
            settings,
            job_id=job_id,
            attempt=attempt,
            spec=spec,
            plan=plan,
            paths=paths,
            worker_name=worker_name,
            heartbeat=heartbeat,
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
        lost = Outcome(JobState.FAILED, ExitReason.WORKER_LOST, None, message)
        record_outcome(engine, job_id, attempt, lost, redis=redis, settings=settings)
        raise


def _forget_keys(redis: Redis, job_id: str) -> None:
    try:
        redis.delete(cancel_key(job_id), heartbeat_key(job_id))
    except RedisError:
        log.warning("job %s: could not delete its Redis keys", job_id, exc_info=True)
