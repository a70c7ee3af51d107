"""RQ entry points, kept thin: `service.executors.rq.RUN_JOB_TASK` names `run_job` here.

Everything the worker owns for its attempts lives in one `worker.context.WorkerContext`, set up
by `configure`; RQ calls `run_job` by name in the worker (`worker.rq_worker`), which finds it
here.
"""

import logging
import os
import socket

from redis.exceptions import RedisError
from rq import get_current_job

from jobs.states import AttemptRef, JobState
from service.settings import Settings
from service.worker_records import delete_worker_record
from worker.attempt import AttemptResult, abandon, run_taken, take_attempt
from worker.attempt_end import record_lost
from worker.context import WorkerContext
from worker.orphans import stop_orphans, wait_until_dead
from worker.process_tree import shutdown_requested

log = logging.getLogger(__name__)
context = WorkerContext()
# The RQ tasks (of this worker's current one) whose attempt failed: RQ's own "Successfully
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
    """A fresh context for the jobs this process will run."""
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


def worker_name() -> str:
    """The name of the RQ worker running this task (host:pid unless named); else this
    process's host:pid."""
    task = get_current_job()
    return (task.worker_name if task is not None else None) or (
        f"{socket.gethostname()}:{os.getpid()}"
    )


def run_job(job_id: str, attempt: int, node: int | None = None) -> None:
    """Run one attempt of a Launchbay job (its node `node`, for a multi-node job) to its end:
    take it (`worker.attempt.take_attempt`), then `run_taken`."""
    _failed_tasks.clear()
    ref = AttemptRef(job_id, attempt, node)
    if shutdown_requested():
        # The worker is shutting down cold: leave the job queued for another worker (the
        # reaper enqueues it again, its queue entry having ended).
        log.warning("%s: the worker is shutting down; not started", ref)
        return
    services = context.services()
    taken = take_attempt(services, ref, worker_name=worker_name())
    if taken is None:
        return
    worker = taken.worker_name
    with context.watchdog.watching(ref):
        if shutdown_requested():
            # The worker started shutting down cold as it took the attempt: it is lost.
            forget_worker(worker)
            abandon(services, taken)
        else:
            say_outcome(run_taken(services, taken, on_shutdown=lambda: forget_worker(worker)))


def lost_with_worker(worker: str, pid: int, ref: AttemptRef) -> None:
    """In the watchdog of worker `worker` (process `pid`), which died running `ref`
    (`worker.watchdog`): no record of the worker's left, nothing of the attempt's running,
    the attempt recorded as lost."""
    log.error("%s: worker %s died while the job ran", ref, worker)
    forget_worker(worker)
    wait_until_dead(pid)
    stopped = stop_orphans(context.settings.data_dir.resolve())
    if stopped:
        log.warning("%s: killed processes %s left by worker %s", ref, stopped, worker)
    record_lost(context.services(), ref, f"worker {worker} died while the job ran")


def forget_worker(worker: str) -> None:
    """When a worker shuts down cold (or dies) in the middle of an attempt, remove its record
    first, so that no dispatcher gives it the retry of the job it just lost (the record would
    live on until the worker's teardown, or its TTL)."""
    try:
        delete_worker_record(context.redis(), worker)
    except RedisError as exc:
        log.warning("the record of worker %s, going, stays until it expires: %s", worker, exc)
