"""The Redis side: RQ enqueueing and every Redis key Launchbay uses, built in one place."""

from redis import Redis
from rq import Queue
from rq.job import Job as RQJob

from service.models import Job

# Referenced by name so the service never imports the worker (and torch with it).
RUN_JOB_TASK = "worker.tasks.run_job"
KEY_PREFIX = "launchbay"
# RQ's own limit on a job is a backstop behind the supervisor's watchdogs; -1 means none.
NO_RQ_TIMEOUT = -1


def rq_job_id(job_id: str, attempt: int) -> str:
    return f"{job_id}-{attempt}"


def cancel_key(job_id: str) -> str:
    """Set while a cancel of the job is requested; the supervisor of its attempt polls it."""
    return f"{KEY_PREFIX}:cancel:{job_id}"


def heartbeat_key(job_id: str) -> str:
    """Set with a short TTL by the worker supervising the job; gone means no worker is on it."""
    return f"{KEY_PREFIX}:heartbeat:{job_id}"


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
