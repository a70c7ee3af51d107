"""The RQ executor: a task is an RQ job on the job's queue, run by `launchbay worker`
(`worker.tasks.run_job`), first in first out. The service submits through the dispatcher's
executor built on it (`service.executors.dispatch`); a worker still takes what an earlier
version left on its shared queues.

An RQ task is built in one place (`prepare_task`), from the task's plan (`attempt_tasks`);
the call RQ stores is `run_job(job_id, attempt)`, or `run_job(job_id, attempt, node)` for a
node of a multi-node job, positionally, as every earlier version enqueued it, and is read
back in one place too (`attempt_of_call`). The dispatcher's hand-over
(`service.executors.dispatch`) enqueues the same tasks on the workers' own queues."""

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job as RQJob
from rq.job import JobStatus
from rq.queue import EnqueueData

from jobs.states import AttemptRef
from service.executors.base import DryRunPlan, ExecutorUnavailable, TaskPlan, TaskStatus
from service.models import Job

# Referenced by name so the service never imports the worker (and torch with it).
RUN_JOB_TASK = "worker.tasks.run_job"
# RQ's own limit on a job is a backstop behind the supervisor's watchdogs; -1 means none.
NO_RQ_TIMEOUT = -1
# RQ job statuses under which a queued attempt will still be run by some worker.
LIVE_RQ_STATUSES = frozenset(
    {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED}
)
# The service's Redis (the RQ queues live there): its URL, and its clients' settings.
REDIS_SECRET_ENV = frozenset({"LAUNCHBAY_REDIS_URL", "REDIS_URL", "REDIS_*", "RQ_*"})


class RQSettings(BaseModel):
    """The RQ executor has no settings of its own: it takes every queue no other executor
    owns, on the service's Redis (`LAUNCHBAY_REDIS_URL`)."""

    def owned_queues(self) -> frozenset[str]:
        return frozenset()


def rq_job_id(job_id: str, attempt: int, node: int | None = None) -> str:
    """The RQ job of an attempt; of one node's task of it, for a multi-node job."""
    return f"{job_id}-{attempt}" if node is None else f"{job_id}-{attempt}-node{node}"


def attempt_tasks(job: Job) -> list[TaskPlan]:
    """The tasks of the job's current attempt: one for a single-node job, one per node when
    `nnodes` > 1."""
    nnodes = job.job_spec().nnodes
    nodes: list[int | None] = [None] if nnodes == 1 else list(range(nnodes))
    return [TaskPlan(rq_job_id(job.id, job.attempt, n), job.id, job.attempt, n) for n in nodes]


def run_job_args(task: TaskPlan) -> tuple[str | int, ...]:
    """The positional arguments of `run_job` for the task."""
    if task.node is None:
        return (task.job_id, task.attempt)
    return (task.job_id, task.attempt, task.node)


def attempt_of_call(args: Sequence[Any]) -> AttemptRef | None:
    """The attempt (and node) of a stored `run_job` call; None for arguments of another
    shape."""
    if len(args) not in (2, 3):
        return None
    node = int(args[2]) if len(args) == 3 and args[2] is not None else None
    return AttemptRef(str(args[0]), int(args[1]), node)


def rq_timeout_for(job: Job, grace_s: float) -> int:
    timeout_s = job.job_spec().timeout_s
    if timeout_s is None:
        return NO_RQ_TIMEOUT
    return int(timeout_s + grace_s + 120)


def prepare_task(job: Job, task: TaskPlan, *, grace_s: float, on: str | None = None) -> EnqueueData:
    """The RQ job of one task of the job's current attempt, ready to enqueue (`on`: the
    worker it is handed to, for its description)."""
    description = f"launchbay job {job.id} attempt {job.attempt}"
    if on is not None:
        description += f" on {on}"
    elif task.node is not None:
        description += f" node {task.node}"
    return Queue.prepare_data(
        RUN_JOB_TASK,
        run_job_args(task),
        job_id=task.task_id,
        timeout=rq_timeout_for(job, grace_s),
        result_ttl=3600,
        failure_ttl=7 * 24 * 3600,
        description=description,
    )


def enqueue_attempt(
    redis: Redis, job: Job, *, grace_s: float, only: Sequence[str] | None = None
) -> None:
    """Put the job's current attempt on its queue (call only after the DB commit): the tasks of
    every node of a multi-node job together, in one transaction, so no other job's task comes
    between them; with `only`, just the tasks of those RQ job ids."""
    queue = Queue(job.queue, connection=redis)
    queue.enqueue_many(
        [
            prepare_task(job, task, grace_s=grace_s)
            for task in attempt_tasks(job)
            if only is None or task.task_id in only
        ]
    )


def drop_queued_attempt(redis: Redis, job: Job) -> None:
    """Take the not-yet-started tasks of the job's attempt off its queue (the worker also
    re-checks the database); a task that is gone already is skipped."""
    for task in attempt_tasks(job):
        try:
            RQJob.fetch(task.task_id, connection=redis).cancel()
        except NoSuchJobError:
            continue


def task_statuses(redis: Redis, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
    """The RQ jobs of each job's current attempt, and whether a worker will still run each: not
    when it is gone (Redis lost its data, or never got it) or ended (a work horse died before
    taking it)."""
    tasks = [(job.id, task.task_id) for job in jobs for task in attempt_tasks(job)]
    if not tasks:
        return {}
    with redis.pipeline(transaction=False) as pipe:
        for _, rq_id in tasks:
            pipe.hget(RQJob.key_for(rq_id), "status")
        statuses = pipe.execute()
    described: dict[str, list[TaskStatus]] = {}
    for (job_id, rq_id), status in zip(tasks, statuses, strict=True):
        live = status is not None and status.decode() in LIVE_RQ_STATUSES
        described.setdefault(job_id, []).append(TaskStatus(rq_id, live))
    return described


def enqueue_again(redis: Redis, job: Job, tasks: Sequence[str], *, grace_s: float) -> None:
    """Enqueue the given tasks of the job's current attempt once more, replacing dead RQ jobs."""
    for rq_id in tasks:
        try:
            RQJob.fetch(rq_id, connection=redis).delete()
        except NoSuchJobError:
            pass
    enqueue_attempt(redis, job, grace_s=grace_s, only=tasks)


class RQExecutor:
    """The executor (`service.executors.base.Executor`) on Redis + RQ."""

    name = "rq"
    reports_ends = False
    secret_env = REDIS_SECRET_ENV

    def __init__(self, redis: Redis, *, grace_s: float) -> None:
        # grace_s: the supervisor's cancel grace, part of the RQ timeout of a task.
        self.redis, self.grace_s = redis, grace_s

    def plan(self, job: Job) -> list[TaskPlan]:
        return attempt_tasks(job)

    def dry_run(self, job: Job) -> DryRunPlan:
        return DryRunPlan(self.name, self.plan(job))

    def submit(self, job: Job) -> None:
        try:
            enqueue_attempt(self.redis, job, grace_s=self.grace_s)
        except RedisError as exc:
            raise ExecutorUnavailable(f"Redis: {exc}") from exc

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        try:
            return task_statuses(self.redis, jobs)
        except RedisError as exc:
            raise ExecutorUnavailable(f"Redis: {exc}") from exc

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        try:
            enqueue_again(self.redis, job, task_ids, grace_s=self.grace_s)
        except RedisError as exc:
            raise ExecutorUnavailable(f"Redis: {exc}") from exc

    def cancel(self, job: Job) -> None:
        try:
            drop_queued_attempt(self.redis, job)
        except RedisError as exc:
            raise ExecutorUnavailable(f"Redis: {exc}") from exc
