"""RQ entry points, kept thin: `service.executors.rq.RUN_JOB_TASK` names `run_job` here.

The worker takes each attempt itself, just before RQ forks the work horse that runs it
(`claim`, called by `worker.rq_worker.LaunchbayWorker`): its database connection is warm, a freshly
forked horse's first transaction is not. The horse inherits what was taken and runs it.

Everything the worker owns for this lives in one `worker.context.WorkerContext`, set up by
`configure`; RQ calls `run_job` by name in the horse, which finds it here.
"""

import logging
import os
import socket

from redis.exceptions import RedisError
from rq import get_current_job
from sqlalchemy.exc import SQLAlchemyError

from jobs.states import AttemptRef, JobState
from service.settings import Settings
from service.worker_records import delete_worker_record
from worker.attempt import AttemptResult, abandon, run_taken, take_attempt
from worker.context import WorkerContext
from worker.process_tree import shutdown_requested

log = logging.getLogger(__name__)
context = WorkerContext()
# The RQ tasks (in this work horse) whose attempt failed: RQ's own "Successfully
# completed" and "Job OK" lines for them, which would say the job went well, are dropped.
_failed_tasks: set[str] = set()


class FailedTaskFilter(logging.Filter):
    """Drops RQ's success lines of a task whose job failed (`say_outcome` logged it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _failed_tasks or not isinstance(record.args, tuple):
            return True
        said = " ".join(str(arg) for arg in record.args)
        return not any(task in said for task in _failed_tasks)


def configure(settings: Settings | None) -> None:
    """A fresh context for the jobs this process (and the work horses it forks) will run."""
    global context
    context = WorkerContext(settings)
    rq_log = logging.getLogger("rq.worker")
    if not any(isinstance(f, FailedTaskFilter) for f in rq_log.filters):
        rq_log.addFilter(FailedTaskFilter())


def say_outcome(result: AttemptResult) -> None:
    """Log how the attempt ended: a failure as an error, with its reason and message."""
    outcome = result.outcome
    if outcome is None:
        return
    if outcome.state is not JobState.FAILED:
        log.info("%s %s (%s)", result.ref, outcome.state, outcome.reason)
        return
    log.error("%s failed (%s): %s", result.ref, outcome.reason, outcome.message)
    task = get_current_job()
    if task is not None:  # RQ names it by id, or by its description
        _failed_tasks.update(str(name) for name in (task.id, task.description) if name)


def current_settings() -> Settings:
    return context.settings


def spare_pools() -> None:
    context.make_spare_pools()


def claim(job_id: str, attempt: int, node: int | None, worker: str) -> None:
    """Take the task's attempt (join it as `node`) now, in the worker, for the horse about to
    be forked; a failure leaves it to the horse."""
    ref = AttemptRef(job_id, attempt, node)
    services = context.services()  # made now, for the horse
    try:
        taken = take_attempt(services, ref, worker_name=worker)
    except SQLAlchemyError as exc:
        log.warning("%s: not taken before the fork: %s", ref, exc)
        return
    context.claimed[ref] = taken


def forget_claims() -> None:
    """Drop what was taken for the horse (the worker's copy, once the horse has run)."""
    context.claimed.clear()


def worker_name() -> str:
    """The RQ worker's name (host:pid) inside a work horse; else this process's host:pid."""
    return os.environ.get("RQ_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}"


def run_job(job_id: str, attempt: int, node: int | None = None) -> None:
    """Run one attempt of a Launchbay job (its node `node`, for a multi-node job) to its end
    (`worker.attempt.take_attempt`, unless the worker took it before the fork, then
    `run_taken`)."""
    ref = AttemptRef(job_id, attempt, node)
    if shutdown_requested() and ref not in context.claimed:
        # The worker died as this horse started: leave the job queued for another worker
        # (the reaper enqueues it again, its queue entry having ended).
        log.warning("%s: the worker is gone; not started", ref)
        return
    services = context.services()
    if ref in context.claimed:
        taken = context.claimed.pop(ref)
    else:
        taken = take_attempt(services, ref, worker_name=worker_name())
    if taken is None:
        return
    worker = taken.worker_name
    if shutdown_requested():
        # The worker died as this horse started: the attempt it took is lost.
        forget_dead_worker(taken.worker_name)
        abandon(services, taken)
    else:
        say_outcome(run_taken(services, taken, on_shutdown=lambda: forget_dead_worker(worker)))


def forget_dead_worker(worker: str) -> None:
    """When this horse's worker died (killed: the kernel told the horse, its parent is gone),
    remove its record, so that no dispatcher gives it the retry of the job it just lost
    while the record lives on for its last TTL. A worker shutting down on request removes
    its own."""
    pid = worker.rpartition(":")[2]
    if not pid.isdigit() or os.getppid() == int(pid):
        return
    try:
        delete_worker_record(context.redis(), worker)
    except RedisError as exc:
        log.warning("the record of worker %s, gone, stays until it expires: %s", worker, exc)
