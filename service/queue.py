"""The Redis side: RQ enqueueing and every Redis key Launchbay uses, built in one place."""

import json
from collections.abc import Sequence
from typing import Any

from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job as RQJob
from rq.job import JobStatus

from service.models import Job

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
    nnodes = int(job.spec.get("nnodes") or 1)
    if nnodes == 1:
        return [(rq_job_id(job.id, job.attempt), (job.id, job.attempt))]
    return [
        (rq_job_id(job.id, job.attempt, node), (job.id, job.attempt, node))
        for node in range(nnodes)
    ]


def cancel_key(job_id: str) -> str:
    """Set while a cancel of the job is requested; the supervisor of its attempt polls it."""
    return f"{KEY_PREFIX}:cancel:{job_id}"


def heartbeat_key(job_id: str) -> str:
    """Set with a short TTL by the worker supervising the job; gone means no worker is on it."""
    return f"{KEY_PREFIX}:heartbeat:{job_id}"


def worker_key(name: str) -> str:
    """Set with a short TTL by each `launchbay worker`: what GET /v1/workers lists."""
    return f"{KEY_PREFIX}:worker:{name}"


WORKER_KEY_PATTERN = worker_key("*")


def rq_timeout_for(job: Job, grace_s: float) -> int:
    timeout_s = job.spec.get("timeout_s")
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


def request_cancel(redis: Redis, job_id: str) -> None:
    redis.set(cancel_key(job_id), "1", ex=7 * 24 * 3600)


def missing_tasks(redis: Redis, jobs: Sequence[Job]) -> dict[str, list[str]]:
    """For each job whose current attempt has tasks no worker will run, their RQ job ids: gone
    (Redis lost its data, or never got it) or ended (a work horse died before taking it)."""
    tasks = [(job.id, rq_id) for job in jobs for rq_id, _ in attempt_tasks(job)]
    if not tasks:
        return {}
    with redis.pipeline(transaction=False) as pipe:
        for _, rq_id in tasks:
            pipe.hget(RQJob.key_for(rq_id), "status")
        statuses = pipe.execute()
    missing: dict[str, list[str]] = {}
    for (job_id, rq_id), status in zip(tasks, statuses, strict=True):
        if status is None or status.decode() not in LIVE_RQ_STATUSES:
            missing.setdefault(job_id, []).append(rq_id)
    return missing


def enqueue_again(redis: Redis, job: Job, tasks: Sequence[str], *, grace_s: float) -> None:
    """Enqueue the given tasks of the job's current attempt once more, replacing dead RQ jobs."""
    for rq_id in tasks:
        try:
            RQJob.fetch(rq_id, connection=redis).delete()
        except NoSuchJobError:
            pass
    enqueue_attempt(redis, job, grace_s=grace_s, only=tasks)


def save_worker_record(redis: Redis, name: str, record: dict[str, Any], ttl_s: float) -> None:
    """A worker's heartbeat: its record (JSON), kept for `ttl_s` unless refreshed."""
    redis.set(worker_key(name), json.dumps(record), px=max(1, int(ttl_s * 1000)))


def delete_worker_record(redis: Redis, name: str) -> None:
    redis.delete(worker_key(name))


def read_worker_records(redis: Redis) -> list[dict[str, Any]]:
    """The records of every worker whose heartbeat has not expired, by name."""
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
