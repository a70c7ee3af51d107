"""The executor seam: how the attempts of jobs are started, found lost and cancelled.

The database says what should run (`service.records`); an executor is how it runs. Its
interface follows torchx's `Scheduler` (`submit_dryrun` / `schedule` / `describe` /
`cancel`), narrowed to what Launchbay asks of it:

    plan(job)              the tasks of the job's current attempt, as data (nothing started)
    dry_run(job)           what submitting the job would launch (`DryRunPlan`: the tasks,
                           and the backend's own text, such as an sbatch script)
    submit(job)            start the current attempt's tasks (call only after the commit)
    describe(jobs)         for each job, its tasks and whether some worker will still run
                           them; an executor that `reports_ends` also says how an ended
                           allocation ended (`TaskEnd`) and why a queued one waits
    resubmit(job, tasks)   start those tasks of the current attempt once more
    cancel(job)            withdraw the attempt's tasks that have not started

and, as data, its `name` (what `POST /v1/dry-run` calls it) and `secret_env`: the variables
(names, or prefixes ending in `*`) of its backend's credentials, which the ranks never get
(`worker.passed_env`).

The implementations, and how one is chosen for a job's queue, are in `service.executors`.

A cancel reaches a *running* attempt by one channel whatever the executor: the job's
`cancelling` state in the database, which the attempt's supervisor reads (`worker.monitor`).
Log lines are not the executor's: the worker ingests every rank's output into the database,
where `service.records.outputs` serves them.

Every failure to reach the executor's backend is `ExecutorUnavailable`.
"""

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from jobs.states import ExitReason, JobState
from service.models import Job
from service.records import AttemptEnd

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
class DryRunPlan:
    """What submitting a job would launch: the executor's name, its tasks, and the text the
    backend would be handed when it has one (Slurm's sbatch script)."""

    executor: str
    tasks: list[TaskPlan]
    script: str | None = None


@dataclass(frozen=True)
class NodePlacement:
    """Where the supervisor of one node of an allocation runs (`worker.node`), as the
    executor's backend tells it: the node's number in the attempt (None: a single-node job),
    the name the job shows for it, and (asked only when LAUNCHBAY_WORKER_HOST is unset) the
    address the other nodes reach it at, if the backend knows it."""

    node: int | None
    worker_name: str
    address: Callable[[], str | None] = lambda: None


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
    # Why it waits, as the job's `pending_reason` shows it (`Slurm: Resources`).
    pending_reason: str | None = None


class Executor(Protocol):
    # Its name in the registry and in `POST /v1/dry-run`.
    name: str
    # Whether `describe` tells how an allocation ended and why it waits (`TaskStatus.ended`,
    # `pending_reason`): the reaper then asks it about its queued and active jobs.
    reports_ends: bool
    # Its backend's credentials in the worker's environment, never handed to a rank.
    secret_env: frozenset[str]

    def plan(self, job: Job) -> list[TaskPlan]: ...

    def dry_run(self, job: Job) -> DryRunPlan: ...

    def submit(self, job: Job) -> None: ...

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]: ...

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None: ...

    def cancel(self, job: Job) -> None: ...


def submit_retry(executor: Executor, end: AttemptEnd) -> None:
    """After the commit of an attempt's end (`service.records.end_attempt`): submit the job's
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
