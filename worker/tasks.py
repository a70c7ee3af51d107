"""RQ entry points, kept thin: `service.queue.RUN_JOB_TASK` names `run_job` here."""

import logging
import os
import socket
from functools import lru_cache

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from sqlalchemy.engine import Engine

from service.db import make_engine
from service.settings import Settings, get_settings
from worker.attempt import run_attempt
from worker.orphans import stop_orphans
from worker.supervise import shutdown_requested

log = logging.getLogger(__name__)
_configured: Settings | None = None


def configure(settings: Settings | None) -> None:
    """Settings for the jobs this process (and the work horses it forks) will run."""
    global _configured
    _configured = settings


def current_settings() -> Settings:
    return _configured or get_settings()


@lru_cache
def _engine(url: str, pid: int) -> Engine:
    # Keyed by PID too: an engine (and its pooled connections) never crosses a fork.
    return make_engine(url)


def worker_name() -> str:
    """The RQ worker's name (host:pid) inside a work horse; else this process's host:pid."""
    return os.environ.get("RQ_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}"


def run_job(job_id: str, attempt: int, node: int | None = None) -> None:
    """Run one attempt of a Launchbay job (its node `node`, for a multi-node job) to its end
    (see `worker.attempt.run_attempt`)."""
    if shutdown_requested():
        # The worker died as this horse started: leave the job queued for another worker
        # (the reaper enqueues it again, its queue entry having ended).
        log.warning("job %s attempt %d: the worker is gone; not started", job_id, attempt)
        return
    settings = current_settings()
    stop_orphans(settings.data_dir.resolve())
    engine = _engine(settings.resolved_database_url, os.getpid())
    # Few retries: the supervisor loop must not stall on a Redis that is away (it copes).
    redis = Redis.from_url(
        settings.redis_url,
        socket_timeout=5,
        socket_connect_timeout=2,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.1), 1),
    )
    try:
        run_attempt(engine, redis, settings, job_id, attempt, worker_name=worker_name(), node=node)
    finally:
        redis.close()
