"""The reaper: ends or retries the jobs whose worker was lost, and enqueues again the queued
jobs whose queue entry Redis lost.

It runs every `reaper_interval_s`, in a thread of the API process (unless `reaper_enabled` is
off) and as `launchbay reaper`. Each pass:

- a starting, running or cancelling job whose last heartbeat (or, before the first, its
  start) is older than `reaper_lost_after_s` has lost its worker: a cancelling one becomes
  `cancelled`; another is retried (`service.store.requeue_job`: queued as attempt + 1, then
  enqueued) while its `max_retries` allow, else it fails with exit reason `worker_lost`;
- a node of a multi-node job with no heartbeat for as long ends its attempt the same way,
  while the other nodes may still heartbeat (`reap_lost_nodes`);
- a job queued for longer than `reaper_queued_grace_s` whose attempt no worker will run (its
  RQ job is gone or ended) is enqueued again.

Several reapers may run at once: every change is a conditional update (`UPDATE ... WHERE
attempt = :seen AND <last sign of life> < :cutoff`) that one of them wins, and only the winner
enqueues. An attempt enqueued twice is harmless: a worker takes it only by moving it from
`queued` to `starting`, which succeeds once.
"""

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.states import ExitReason, JobState, NodeState
from service.db import session_scope
from service.models import Job, utcnow
from service.queue import enqueue_again, enqueue_attempt, missing_tasks
from service.settings import Settings
from service.store import (
    find_lost_jobs,
    find_lost_nodes,
    find_queued_jobs,
    finish_node,
    queued_since,
    requeue_job,
    transition_job,
)

log = logging.getLogger("launchbay.reaper")


@dataclass
class ReapReport:
    """The ids of the jobs one pass changed, by what it did."""

    retried: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    enqueued: list[str] = field(default_factory=list)


def reap_once(
    engine: Engine, redis: Redis, settings: Settings, *, now: datetime | None = None
) -> ReapReport:
    """One pass (see the module docstring)."""
    now = now or utcnow()
    report = ReapReport()
    reap_lost_jobs(engine, redis, settings, now, report)
    reap_lost_nodes(engine, redis, settings, now, report)
    try:
        enqueue_missing_attempts(engine, redis, settings, now, report)
    except RedisError as exc:
        log.warning("reaper: cannot check the queues: %s", exc)
    return report


def reap_lost_jobs(
    engine: Engine, redis: Redis, settings: Settings, now: datetime, report: ReapReport
) -> None:
    lost_before = now - timedelta(seconds=settings.reaper_lost_after_s)
    with session_scope(engine) as session:
        lost = find_lost_jobs(session, lost_before)
    for job in lost:
        message = (
            f"worker {job.worker or '(none yet)'} lost: no heartbeat for "
            f"{settings.reaper_lost_after_s:g} s"
        )
        with session_scope(engine) as session:
            if job.state == JobState.CANCELLING:
                if transition_job(
                    session,
                    job.id,
                    JobState.CANCELLED,
                    attempt=job.attempt,
                    lost_before=lost_before,
                    exit_reason=ExitReason.CANCELLED,
                    message=f"cancelled; {message}",
                ):
                    log.warning("job %s: %s while cancelling; cancelled", job.id, message)
                    report.cancelled.append(job.id)
                continue
            retried = requeue_job(
                session,
                job.id,
                job.attempt,
                exit_reason=ExitReason.WORKER_LOST,
                message=message,
                lost_before=lost_before,
            )
            if retried is None:
                if transition_job(
                    session,
                    job.id,
                    JobState.FAILED,
                    attempt=job.attempt,
                    lost_before=lost_before,
                    exit_reason=ExitReason.WORKER_LOST,
                    message=message,
                ):
                    log.warning("job %s attempt %d: %s; failed", job.id, job.attempt, message)
                    report.failed.append(job.id)
                continue
        log.warning("job %s attempt %d: %s; retrying", job.id, job.attempt, message)
        _enqueue_retry(redis, settings, retried, report)


def reap_lost_nodes(
    engine: Engine, redis: Redis, settings: Settings, now: datetime, report: ReapReport
) -> None:
    """A node of a multi-node job whose worker stopped heartbeating while its peers go on ends
    the attempt as a whole (`service.store.finish_node`): retried or failed as `worker_lost`,
    or cancelled if it was cancelling. The peers then see the attempt is over and stop."""
    lost_before = now - timedelta(seconds=settings.reaper_lost_after_s)
    with session_scope(engine) as session:
        lost = find_lost_nodes(session, lost_before)
    for node in lost:
        message = f"worker {node.worker} lost: no heartbeat for {settings.reaper_lost_after_s:g} s"
        with session_scope(engine) as session:
            end = finish_node(
                session,
                node.job_id,
                node.attempt,
                node.node,
                state=NodeState.FAILED,
                exit_reason=ExitReason.WORKER_LOST,
                message=message,
                lost_before=lost_before,
            )
            job = session.get(Job, node.job_id) if end.recorded else None
        if job is None:
            continue
        log.warning("job %s attempt %d: node %d %s", node.job_id, node.attempt, node.node, message)
        if end.retried is not None:
            _enqueue_retry(redis, settings, end.retried, report)
        elif job.state == JobState.CANCELLED:
            report.cancelled.append(job.id)
        else:
            report.failed.append(job.id)


def _enqueue_retry(redis: Redis, settings: Settings, job: Job, report: ReapReport) -> None:
    report.retried.append(job.id)
    try:
        enqueue_attempt(redis, job, grace_s=settings.cancel_grace_s)
    except RedisError as exc:
        # Queued without a queue entry: a later pass enqueues it.
        log.warning("job %s: retry not enqueued yet: %s", job.id, exc)


def enqueue_missing_attempts(
    engine: Engine, redis: Redis, settings: Settings, now: datetime, report: ReapReport
) -> None:
    grace_s = settings.reaper_queued_grace_s
    with session_scope(engine) as session:
        queued = find_queued_jobs(session, now - timedelta(seconds=grace_s))
    missing = missing_tasks(redis, queued)
    for job in queued:
        if job.id not in missing:
            continue
        with session_scope(engine) as session:
            since = queued_since(session, job.id, job.attempt)
            current = session.get(Job, job.id)
        if current is None or (current.state, current.attempt) != (JobState.QUEUED, job.attempt):
            continue
        if since is not None and since > now.timestamp() - grace_s:
            continue  # a retry just queued: its enqueue may be on the way
        enqueue_again(redis, current, missing[job.id], grace_s=settings.cancel_grace_s)
        log.warning("job %s attempt %d: queue entry lost; enqueued again", job.id, job.attempt)
        report.enqueued.append(job.id)


def reap_until(
    engine: Engine,
    redis: Redis,
    settings: Settings,
    stop: threading.Event,
    *,
    interval_s: float | None = None,
) -> None:
    """A pass every `interval_s` (default `reaper_interval_s`) until `stop` is set; a pass
    that fails (database or Redis away) is logged and the next one tried."""
    interval = interval_s or settings.reaper_interval_s
    if settings.reaper_lost_after_s < 3 * settings.heartbeat_interval_s:
        log.warning(
            "reaper_lost_after_s=%g is less than three heartbeats (heartbeat_interval_s=%g): "
            "live jobs may be taken for lost",
            settings.reaper_lost_after_s,
            settings.heartbeat_interval_s,
        )
    while not stop.is_set():
        try:
            reap_once(engine, redis, settings)
        except (SQLAlchemyError, RedisError) as exc:
            log.warning("reaper pass failed: %s: %s", type(exc).__name__, exc)
        except Exception:
            log.exception("reaper pass failed")
        stop.wait(interval)


class ReaperThread(threading.Thread):
    """The reaper in a daemon thread of this process (the API's)."""

    def __init__(self, engine: Engine, redis: Redis, settings: Settings) -> None:
        super().__init__(name="launchbay-reaper", daemon=True)
        self.engine, self.redis, self.settings = engine, redis, settings
        self.halt = threading.Event()

    def run(self) -> None:
        reap_until(self.engine, self.redis, self.settings, self.halt)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask it to stop and wait for the pass under way, if any."""
        self.halt.set()
        self.join(timeout_s)


def run_reaper(interval_s: float | None = None, once: bool = False) -> None:
    """`launchbay reaper`: run passes until interrupted (or one, with `once`)."""
    from service.db import make_engine
    from service.settings import get_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = get_settings()
    engine = make_engine(settings.resolved_database_url)
    redis = Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
    try:
        if once:
            report = reap_once(engine, redis, settings)
            log.info("reaper: %s", report)
            return
        log.info("reaper: a pass every %g s", interval_s or settings.reaper_interval_s)
        try:
            reap_until(engine, redis, settings, threading.Event(), interval_s=interval_s)
        except KeyboardInterrupt:
            pass
    finally:
        redis.close()
        engine.dispose()
