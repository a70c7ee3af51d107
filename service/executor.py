"""The executor seam: how the attempts of jobs are started, found lost and cancelled.

The database says what should run (`service.store`); an executor is how it runs. Its
interface follows torchx's `Scheduler` (`submit_dryrun` / `schedule` / `describe` /
`cancel`), narrowed to what Launchbay asks of it:

    plan(job)              the tasks of the job's current attempt, as data (nothing started)
    submit(job)            start the current attempt's tasks (call only after the commit)
    describe(jobs)         for each job, its tasks and whether some worker will still run them
    resubmit(job, tasks)   start those tasks of the current attempt once more
    cancel(job)            withdraw the attempt's tasks that have not started

Three implementations:

    service.queue.RQExecutor                      Redis + RQ, first in first out
    service.scheduling.executor.DispatchExecutor  RQ under the dispatcher (LAUNCHBAY_SCHEDULER
                                                  `dispatcher`): a job waits for its devices
                                                  to be reserved, then each node's task goes
                                                  to the RQ queue of its reserved worker
    service.slurm.executor.SlurmExecutor          one Slurm batch job per attempt, for the
                                                  queues in LAUNCHBAY_SLURM_QUEUES

`service.executors.make_executor` picks for the API, the reaper and the worker: one of the
RQ two, behind a `RoutingExecutor` that hands the Slurm queues' jobs to Slurm when there are
such queues. A Kubernetes one would be one more beside them.

A cancel reaches a *running* attempt by one channel whatever the executor: the job's
`cancelling` state in the database, which the attempt's supervisor reads (`worker.monitor`).
Log lines are not the executor's: the worker ingests every rank's output into the database,
where `service.store.outputs` serves them.

Every failure to reach the executor's backend is `ExecutorUnavailable`.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from jobs.states import ExitReason, JobState
from service.models import Job
from service.store import AttemptEnd

log = logging.getLogger(__name__)


class ExecutorUnavailable(Exception):
    """The executor's backend (for RQ: Redis) did not answer; nothing may have been done."""


@dataclass(frozen=True)
class TaskPlan:
    """One task of an attempt: one for a single-node job, one per node when `nnodes` > 1."""

    task_id: str
    job_id: str
    attempt: int
    node: int | None


@dataclass(frozen=True)
class TaskEnd:
    """How a task's attempt ended, as its backend tells it (Slurm's final job state): what
    the reaper records when the attempt's supervisor could not (`service.reaper`)."""

    state: JobState
    exit_reason: ExitReason
    message: str


@dataclass(frozen=True)
class TaskStatus:
    task_id: str
    # Some worker runs it or will: it is queued, started, deferred or scheduled.
    live: bool
    # Not live, and its backend knows how it ended (RQ never does).
    ended: TaskEnd | None = None
    # Why it waits, in the backend's words (Slurm's reason for a pending job).
    pending_reason: str | None = None


class Executor(Protocol):
    def plan(self, job: Job) -> list[TaskPlan]: ...

    def submit(self, job: Job) -> None: ...

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]: ...

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None: ...

    def cancel(self, job: Job) -> None: ...


def submit_retry(executor: Executor, end: AttemptEnd) -> None:
    """After the commit of an attempt's end (`service.store.end_attempt`): submit the job's
    next attempt, if the end retried it. A backend that is away leaves the job queued
    without a task, which the reaper submits later."""
    job = end.retried
    if job is None:
        return
    log.info("job %s: attempt %d failed; retrying", job.id, job.attempt - 1)
    try:
        executor.submit(job)
    except ExecutorUnavailable as exc:
        log.warning("job %s: retry not submitted yet (the reaper will): %s", job.id, exc)


def lost_tasks(executor: Executor, jobs: Sequence[Job]) -> dict[str, list[str]]:
    """For each job whose current attempt has tasks no worker will run, their ids."""
    lost: dict[str, list[str]] = {}
    for job_id, tasks in executor.describe(jobs).items():
        gone = [t.task_id for t in tasks if not t.live]
        if gone:
            lost[job_id] = gone
    return lost
