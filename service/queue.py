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


def rq_job_id(job_id: str, attempt: int) -> str:
    return f"{job_id}-{attempt}"


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


def enqueue_attempt(redis: Redis, job: Job, *, grace_s: float) -> None:
    """Put the job's current attempt on its queue (call only after the DB commit)."""
    Queue(job.queue, connection=redis).enqueue(
        RUN_JOB_TASK,
        job.id,
        job.attempt,
        job_id=rq_job_id(job.id, job.attempt),
        job_timeout=rq_timeout_for(job, grace_s),
        result_ttl=3600,
        failure_ttl=7 * 24 * 3600,
        description=f"launchbay job {job.id} attempt {job.attempt}",
    )


def drop_queued_attempt(redis: Redis, job: Job) -> None:
    """Take a not-yet-started attempt off its queue (the worker also re-checks the DB)."""
    rq_job = RQJob.fetch(rq_job_id(job.id, job.attempt), connection=redis)
    rq_job.cancel()


def request_cancel(redis: Redis, job_id: str) -> None:
    redis.set(cancel_key(job_id), "1", ex=7 * 24 * 3600)


def missing_attempts(redis: Redis, jobs: Sequence[Job]) -> list[Job]:
    """The jobs whose current attempt no worker will run: its RQ job is gone (Redis lost its
    data, or never got it) or ended (its work horse died before taking it)."""
    if not jobs:
        return []
    with redis.pipeline(transaction=False) as pipe:
        for job in jobs:
            pipe.hget(RQJob.key_for(rq_job_id(job.id, job.attempt)), "status")
        statuses = pipe.execute()
    return [
        job
        for job, status in zip(jobs, statuses, strict=True)
        if status is None or status.decode() not in LIVE_RQ_STATUSES
    ]


def enqueue_again(redis: Redis, job: Job, *, grace_s: float) -> None:
    """Enqueue the job's current attempt once more, replacing a dead RQ job of it."""
    try:
        RQJob.fetch(rq_job_id(job.id, job.attempt), connection=redis).delete()
    except NoSuchJobError:
        pass
    enqueue_attempt(redis, job, grace_s=grace_s)


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
