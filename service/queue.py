"""The Redis side of the RQ executor (`service.executor`): `RQExecutor`, the ids and arguments
of an attempt's RQ tasks, and the workers' records that GET /v1/workers lists.

`KEY_PREFIX` begins every Redis key Launchbay names itself, but not all of them are built
here: the dispatcher's wake-up list is `service.scheduling.executor.WAKE_KEY`, the rate limits'
counters `service.policy.RATE_KEY` and `service.code_usage.UPLOAD_RATE_KEY`; the RQ queues
(each worker's own under the dispatcher: `service.scheduling.capacity.dispatch_queue_name`)
are named by Launchbay and keyed by RQ."""

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job as RQJob
from rq.job import JobStatus

from service.executor import ExecutorUnavailable, TaskPlan, TaskStatus
from service.models import Job
from service.schemas import WorkerRecord

# Referenced by name so the service never imports the worker (and torch with it).
RUN_JOB_TASK = "worker.tasks.run_job"
KEY_PREFIX = "launchbay"
# RQ's own limit on a job is a backstop behind the supervisor's watchdogs; -1 means none.
NO_RQ_TIMEOUT = -1
# RQ job statuses under which a queued attempt will still be run by some worker.
LIVE_RQ_STATUSES = frozenset(
    {JobStatus.QUEUED, JobStatus.STARTED, JobStatus.DEFERRED, JobStatus.SCHEDULED}
)


def rq_job_id(job_id: str, attempt: int, node: int | None = None) -> str:
    """The RQ job of an attempt; of one node's task of it, for a multi-node job."""
    return f"{job_id}-{attempt}" if node is None else f"{job_id}-{attempt}-node{node}"


def attempt_tasks(job: Job) -> list[tuple[str, tuple[str | int, ...]]]:
    """(RQ job id, task arguments) of each task of the job's current attempt: one for a
    single-node job, one per node (`run_job(id, attempt, node)`) when `nnodes` > 1."""
    nnodes = job.job_spec().nnodes
    if nnodes == 1:
        return [(rq_job_id(job.id, job.attempt), (job.id, job.attempt))]
    return [
        (rq_job_id(job.id, job.attempt, node), (job.id, job.attempt, node))
        for node in range(nnodes)
    ]


def worker_key(name: str) -> str:
    """Set with a short TTL by each `launchbay worker`: what GET /v1/workers lists."""
    return f"{KEY_PREFIX}:worker:{name}"


WORKER_KEY_PATTERN = worker_key("*")


def rq_timeout_for(job: Job, grace_s: float) -> int:
    timeout_s = job.job_spec().timeout_s
    if timeout_s is None:
        return NO_RQ_TIMEOUT
    return int(timeout_s + grace_s + 120)


def enqueue_attempt(
    redis: Redis, job: Job, *, grace_s: float, only: Sequence[str] | None = None
) -> None:
    """Put the job's current attempt on its queue (call only after the DB commit): the tasks of
    every node of a multi-node job together, in one transaction, so no other job's task comes
    between them; with `only`, just the tasks of those RQ job ids."""
    queue = Queue(job.queue, connection=redis)
    queue.enqueue_many(
        [
            Queue.prepare_data(
                RUN_JOB_TASK,
                args,
                job_id=rq_id,
                timeout=rq_timeout_for(job, grace_s),
                result_ttl=3600,
                failure_ttl=7 * 24 * 3600,
                description=f"launchbay job {job.id} attempt {job.attempt}"
                + (f" node {args[2]}" if len(args) > 2 else ""),
            )
            for rq_id, args in attempt_tasks(job)
            if only is None or rq_id in only
        ]
    )


def drop_queued_attempt(redis: Redis, job: Job) -> None:
    """Take the not-yet-started tasks of the job's attempt off its queue (the worker also
    re-checks the database); a task that is gone already is skipped."""
    for rq_id, _ in attempt_tasks(job):
        try:
            RQJob.fetch(rq_id, connection=redis).cancel()
        except NoSuchJobError:
            continue


def task_statuses(redis: Redis, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
    """The RQ jobs of each job's current attempt, and whether a worker will still run each: not
    when it is gone (Redis lost its data, or never got it) or ended (a work horse died before
    taking it)."""
    tasks = [(job.id, rq_id) for job in jobs for rq_id, _ in attempt_tasks(job)]
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
    """The executor (`service.executor.Executor`) on Redis + RQ: a task is an RQ job on the
    job's queue, run by `launchbay worker` (`worker.tasks.run_job`)."""

    def __init__(self, redis: Redis, *, grace_s: float) -> None:
        # grace_s: the supervisor's cancel grace, part of the RQ timeout of a task.
        self.redis, self.grace_s = redis, grace_s

    def plan(self, job: Job) -> list[TaskPlan]:
        return [
            TaskPlan(rq_id, job.id, job.attempt, int(args[2]) if len(args) > 2 else None)
            for rq_id, args in attempt_tasks(job)
        ]

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


def save_worker_record(redis: Redis, name: str, record: dict[str, Any], ttl_s: float) -> None:
    """A worker's heartbeat: its record (JSON), kept for `ttl_s` unless refreshed."""
    redis.set(worker_key(name), json.dumps(record), px=max(1, int(ttl_s * 1000)))


def save_worker(redis: Redis, record: WorkerRecord, ttl_s: float) -> None:
    """`save_worker_record` of a worker's typed record."""
    save_worker_record(redis, record.name, record.model_dump(mode="json"), ttl_s)


def delete_worker_record(redis: Redis, name: str) -> None:
    redis.delete(worker_key(name))


def read_worker_records(redis: Redis) -> list[dict[str, Any]]:
    """The records of every worker whose heartbeat has not expired, by name, as stored."""
    keys = sorted(redis.scan_iter(match=WORKER_KEY_PATTERN, count=500))
    records = []
    for raw in redis.mget(keys) if keys else []:
        if raw is None:
            continue  # expired between the scan and the read
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def load_worker_records(redis: Redis) -> list[WorkerRecord]:
    """`read_worker_records`, typed; a record of another version, or damaged, is skipped."""
    records = []
    for raw in read_worker_records(redis):
        try:
            records.append(WorkerRecord.model_validate(raw))
        except ValidationError:
            continue
    return records
