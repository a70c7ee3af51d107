"""The reaper: ends or retries the jobs whose worker was lost, and enqueues again the queued
jobs whose tasks the executor lost (for RQ: Redis lost the queue entry).

It runs every `reaper_interval_s`, in a thread of the API process (unless `reaper_enabled` is
off) and as `launchbay reaper`. Each pass:

- each executor that says how its allocations end (`reports_ends`: Slurm) is asked about
  its queued and active jobs: an allocation that ended without its supervisor recording it
  ends the attempt as the backend tells, and a queued job shows why it waits
  (`reap_ended_tasks`);
- a starting, running or cancelling job whose last heartbeat (or, before the first, its
  start) is older than `reaper_lost_after_s` has lost its worker: a cancelling one becomes
  `cancelled`; another is retried (`service.records.end_attempt`: queued as attempt + 1, then
  submitted to the executor) while its `max_retries` allow, else it fails with exit reason
  `worker_lost`;
- a node of a multi-node job with no heartbeat for as long ends its attempt the same way,
  while the other nodes may still heartbeat (`reap_lost_nodes`);
- a job queued for longer than `reaper_queued_grace_s` whose attempt no worker will run (its
  RQ job is gone or ended) is enqueued again;
- the metrics and logs of jobs finished longer ago than their retention are deleted
  (`service.retention`).

A worker cannot heartbeat while the database is away, so its jobs look lost the moment the
database is back. A reaper therefore declares no job or node lost until the database has
taken its writes for `reaper_lost_after_s` in a row: each pass first writes
(`service.readiness.write_to_database`), and a pass that cannot write, or that meets the
database away later on (`service.outages`), starts that count again, as does starting (a
reaper cannot know what happened before it ran). The workers of live jobs heartbeat again
within that time, and a worker that could not record how its attempt ended records it
(`worker.attempt_end`).

Several reapers may run at once: every change is a conditional update (`UPDATE ... WHERE
attempt = :seen AND <last sign of life> < :cutoff`) that one of them wins, and only the winner
enqueues. An attempt enqueued twice is harmless: a worker takes it only by moving it from
`queued` to `starting`, which succeeds once.
"""

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from redis import Redis
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.states import ACTIVE_STATES, ExitReason, JobState, NodeState
from service.db import session_scope
from service.executors.base import (
    Executor,
    ExecutorUnavailable,
    TaskStatus,
    lost_tasks,
    submit_retry,
)
from service.executors.registry import parts_of
from service.models import Job, utcnow
from service.outages import outage_of
from service.readiness import write_to_database
from service.records import (
    QueuedShown,
    commit_end,
    end_attempt,
    find_jobs_on_queues,
    find_lost_jobs,
    find_lost_nodes,
    find_queued_jobs,
    finish_node,
    queued_since,
    show_queued,
)
from service.retention import prune_outputs
from service.settings import Settings

log = logging.getLogger("launchbay.reaper")


@dataclass
class ReapReport:
    """The ids of the jobs one pass changed, by what it did."""

    retried: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    enqueued: list[str] = field(default_factory=list)
    # Jobs whose metrics or logs retention deleted (service.retention).
    pruned: list[str] = field(default_factory=list)

    def add(self, job: Job | None, retried: bool) -> None:
        """Note how a lost attempt ended: `job` as it is now."""
        if job is None:
            return
        if retried:
            self.retried.append(job.id)
        elif job.state == JobState.CANCELLED:
            self.cancelled.append(job.id)
        else:
            self.failed.append(job.id)


def reap_once(
    engine: Engine,
    executor: Executor,
    settings: Settings,
    *,
    now: datetime | None = None,
    reap_lost: bool = True,
) -> ReapReport:
    """One pass (see the module docstring); without `reap_lost`, no job or node is declared
    lost (the database was away lately)."""
    now = now or utcnow()
    report = ReapReport()
    try:
        reap_ended_tasks(engine, executor, report)
    except ExecutorUnavailable as exc:
        log.warning("reaper: cannot ask the executor how allocations ended: %s", exc)
    if reap_lost:
        reap_lost_jobs(engine, executor, settings, now, report)
        reap_lost_nodes(engine, executor, settings, now, report)
    try:
        resubmit_lost_tasks(engine, executor, settings, now, report)
    except ExecutorUnavailable as exc:
        log.warning("reaper: cannot check the queues: %s", exc)
    report.pruned = prune_outputs(engine, settings, now)
    return report


def reap_ended_tasks(engine: Engine, executor: Executor, report: ReapReport) -> None:
    """The queued and active jobs of every executor that `reports_ends` (Slurm), asked how
    their allocations are: one that ended while the job is still queued or active ended
    without the supervisor inside recording it (its backend stopped it at the time limit,
    preempted or cancelled it, or its node failed), so the end is recorded as the backend
    tells it (`TaskStatus.ended`). A job cancelling whose allocation still runs gets it
    cancelled in the backend as well; a queued one shows why it waits (`note_pending`)."""
    for part, queues in parts_of(executor):
        if not part.reports_ends or not queues:
            continue
        with session_scope(engine) as session:
            jobs = find_jobs_on_queues(session, sorted(queues), [JobState.QUEUED, *ACTIVE_STATES])
        if jobs:
            record_ended_tasks(engine, part, executor, jobs, report)


def record_ended_tasks(
    engine: Engine, part: Executor, executor: Executor, jobs: Sequence[Job], report: ReapReport
) -> None:
    """`reap_ended_tasks` for the jobs of one executor (`part`); a retry is submitted to the
    process's `executor`."""
    described = part.describe(jobs)
    for job in jobs:
        tasks = described.get(job.id, [])
        cancelling = job.state == JobState.CANCELLING
        if cancelling and any(t.live for t in tasks):
            part.cancel(job)
            continue
        if job.state == JobState.QUEUED:
            note_pending(engine, job, tasks)
        ended = next((t.ended for t in tasks if t.ended is not None), None)
        if ended is None or any(t.live for t in tasks):
            continue
        with session_scope(engine) as session:
            end = end_attempt(
                session,
                job.id,
                job.attempt,
                JobState.CANCELLED if cancelling else ended.state,
                exit_reason=ExitReason.CANCELLED if cancelling else ended.exit_reason,
                message=ended.message,
            )
            commit_end(session, end)
        if not end.recorded:
            continue
        log.warning("job %s attempt %d: %s", job.id, job.attempt, ended.message)
        report.add(end.retried or job_now(engine, job.id), end.retried is not None)
        submit_retry(executor, end)


def note_pending(engine: Engine, job: Job, tasks: Sequence[TaskStatus]) -> None:
    """A queued job's `pending_reason` as its executor's backend gives it (Slurm's squeue
    REASON: `Slurm: Resources`), while the job is still queued at this attempt."""
    text = next((t.pending_reason for t in tasks if t.pending_reason), None)
    if text == job.pending_reason:
        return
    with engine.begin() as connection:
        show_queued(connection, [QueuedShown(job.id, job.attempt, None, text)])


def reap_lost_jobs(
    engine: Engine, executor: Executor, settings: Settings, now: datetime, report: ReapReport
) -> None:
    lost_before = now - timedelta(seconds=settings.reaper_lost_after_s)
    with session_scope(engine) as session:
        lost = find_lost_jobs(session, lost_before)
    for job in lost:
        message = (
            f"worker {job.worker or '(none yet)'} lost: no heartbeat for "
            f"{settings.reaper_lost_after_s:g} s"
        )
        cancelling = job.state == JobState.CANCELLING
        with session_scope(engine) as session:
            end = end_attempt(
                session,
                job.id,
                job.attempt,
                JobState.CANCELLED if cancelling else JobState.FAILED,
                exit_reason=ExitReason.CANCELLED if cancelling else ExitReason.WORKER_LOST,
                message=f"cancelled; {message}" if cancelling else message,
                lost_before=lost_before,
            )
            commit_end(session, end)
        if not end.recorded:
            continue
        outcome = "retrying" if end.retried else "cancelled" if cancelling else "failed"
        log.warning("job %s attempt %d: %s; %s", job.id, job.attempt, message, outcome)
        report.add(end.retried or job_now(engine, job.id), end.retried is not None)
        submit_retry(executor, end)


def job_now(engine: Engine, job_id: str) -> Job | None:
    with session_scope(engine) as session:
        return session.get(Job, job_id)


def reap_lost_nodes(
    engine: Engine, executor: Executor, settings: Settings, now: datetime, report: ReapReport
) -> None:
    """A node of a multi-node job whose worker stopped heartbeating while its peers go on ends
    the attempt as a whole (`service.records.finish_node`): retried or failed as `worker_lost`,
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
            commit_end(session, end)
        if not end.recorded:
            continue
        log.warning("job %s attempt %d: node %d %s", node.job_id, node.attempt, node.node, message)
        report.add(end.retried or job_now(engine, node.job_id), end.retried is not None)
        submit_retry(executor, end)


def resubmit_lost_tasks(
    engine: Engine, executor: Executor, settings: Settings, now: datetime, report: ReapReport
) -> None:
    grace_s = settings.reaper_queued_grace_s
    with session_scope(engine) as session:
        queued = find_queued_jobs(session, now - timedelta(seconds=grace_s))
    missing = lost_tasks(executor, queued)
    for job in queued:
        if job.id not in missing:
            continue
        with session_scope(engine) as session:
            since = queued_since(session, job.id, job.attempt)
            current = session.get(Job, job.id)
        if current is None or (current.state, current.attempt) != (JobState.QUEUED, job.attempt):
            continue
        if since is not None and since > now.timestamp() - grace_s:
            continue  # a retry just queued: its submission may be on the way
        executor.resubmit(current, missing[job.id])
        log.warning("job %s attempt %d: queue entry lost; enqueued again", job.id, job.attempt)
        report.enqueued.append(job.id)


def reap_until(
    engine: Engine,
    executor: Executor,
    settings: Settings,
    stop: threading.Event,
    *,
    interval_s: float | None = None,
) -> None:
    """A pass every `interval_s` (default `reaper_interval_s`) until `stop` is set; a pass
    that fails (database or Redis away) is logged and the next one tried. Lost jobs are
    reaped only once the database has taken this reaper's writes for `reaper_lost_after_s`
    (see the module docstring)."""
    interval = interval_s or settings.reaper_interval_s
    if settings.reaper_lost_after_s < 3 * settings.heartbeat_interval_s:
        log.warning(
            "reaper_lost_after_s=%g is less than three heartbeats (heartbeat_interval_s=%g): "
            "live jobs may be taken for lost",
            settings.reaper_lost_after_s,
            settings.heartbeat_interval_s,
        )
    database_failed_at = time.monotonic()
    while not stop.is_set():
        try:
            write_to_database(engine)
            settled = time.monotonic() - database_failed_at >= settings.reaper_lost_after_s
            reap_once(engine, executor, settings, reap_lost=settled)
        except SQLAlchemyError as exc:
            if outage_of(exc) is not None:
                database_failed_at = time.monotonic()
            log.warning("reaper pass failed: %s: %s", type(exc).__name__, exc)
        except ExecutorUnavailable as exc:
            log.warning("reaper pass failed: %s: %s", type(exc).__name__, exc)
        except Exception:
            log.exception("reaper pass failed")
        stop.wait(interval)


class ReaperThread(threading.Thread):
    """The reaper in a daemon thread of this process (the API's)."""

    def __init__(self, engine: Engine, executor: Executor, settings: Settings) -> None:
        super().__init__(name="launchbay-reaper", daemon=True)
        self.engine, self.executor, self.settings = engine, executor, settings
        self.halt = threading.Event()

    def run(self) -> None:
        reap_until(self.engine, self.executor, self.settings, self.halt)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask it to stop and wait for the pass under way, if any."""
        self.halt.set()
        self.join(timeout_s)


def run_reaper(interval_s: float | None = None, once: bool = False) -> None:
    """`launchbay reaper`: run passes until interrupted (or one, with `once`)."""
    from service.db import make_engine
    from service.executors.registry import make_executor
    from service.settings import get_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    settings = get_settings()
    engine = make_engine(settings.resolved_database_url)
    redis = Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=2)
    executor = make_executor(settings, redis, engine)
    try:
        if once:
            report = reap_once(engine, executor, settings)
            log.info("reaper: %s", report)
            return
        log.info("reaper: a pass every %g s", interval_s or settings.reaper_interval_s)
        try:
            reap_until(engine, executor, settings, threading.Event(), interval_s=interval_s)
        except KeyboardInterrupt:
            pass
    finally:
        redis.close()
        engine.dispose()
