"""RQ entry points, kept thin: `service.queue.RUN_JOB_TASK` names `run_job` here.

The worker takes each attempt itself, just before RQ forks the work horse that runs it
(`claim`, called by `worker.main.LaunchbayWorker`): its database connection is warm, a freshly
forked horse's first transaction is not. The horse inherits what was taken and runs it.
"""

import logging
import os
import socket

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import Pool

from service.db import make_engine
from service.settings import Settings, get_settings
from worker.attempt import TakenAttempt, abandon, run_taken, take_attempt
from worker.supervise import shutdown_requested

log = logging.getLogger(__name__)
_configured: Settings | None = None


def configure(settings: Settings | None) -> None:
    """Settings for the jobs this process (and the work horses it forks) will run."""
    global _configured
    _configured = settings


def current_settings() -> Settings:
    return _configured or get_settings()


_engines: dict[str, tuple[Engine, int]] = {}
# The pool each engine's next work horse will use, made by the worker while idle.
_spare_pools: dict[str, Pool] = {}
_redis_clients: dict[str, Redis] = {}
# What the worker took before forking the horse, by task (job id, attempt, node); None: the
# task is not to be run.
_claimed: dict[tuple[str, int, int | None], TakenAttempt | None] = {}


def engine_for(url: str) -> Engine:
    """This process's engine for `url`. A work horse reuses the worker's engine, warm
    statement cache and all, with a pool of its own (the spare one, else
    `dispose(close=False)`): no pooled connection crosses a fork."""
    found = _engines.get(url)
    if found is None:
        engine = make_engine(url)
    else:
        engine, pid = found
        if pid == os.getpid():
            return engine
        spare = _spare_pools.pop(url, None)
        if spare is None:
            engine.dispose(close=False)
        else:
            engine.pool = spare
    _engines[url] = (engine, os.getpid())
    return engine


def spare_pools() -> None:
    """Make, in the worker while it is idle, the new pool each engine will need in the next
    work horse (what `dispose(close=False)` makes there, at the cost of a few hundred
    copy-on-write page faults on the way to the launch)."""
    for url, (engine, _) in _engines.items():
        _spare_pools[url] = engine.pool.recreate()


def redis_for(url: str) -> Redis:
    """This process's client for supervising jobs, made once in the worker and inherited by
    its horses (redis-py's pool notices the fork and opens connections of the horse's own).
    Few retries: the supervisor loop must not stall on a Redis that is away (it copes)."""
    client = _redis_clients.get(url)
    if client is None:
        client = Redis.from_url(
            url,
            socket_timeout=5,
            socket_connect_timeout=2,
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.1), 1),
        )
        _redis_clients[url] = client
    return client


def claim(job_id: str, attempt: int, node: int | None, worker: str) -> None:
    """Take the task's attempt (join it as `node`) now, in the worker, for the horse about to
    be forked; a failure leaves it to the horse."""
    settings = current_settings()
    engine = engine_for(settings.resolved_database_url)
    redis_for(settings.redis_url)  # for the horse
    try:
        taken = take_attempt(engine, settings, job_id, attempt, node=node, worker_name=worker)
    except SQLAlchemyError as exc:
        log.warning("job %s attempt %d: not taken before the fork: %s", job_id, attempt, exc)
        return
    _claimed[(job_id, attempt, node)] = taken


def forget_claims() -> None:
    """Drop what was taken for the horse (the worker's copy, once the horse has run)."""
    _claimed.clear()


def worker_name() -> str:
    """The RQ worker's name (host:pid) inside a work horse; else this process's host:pid."""
    return os.environ.get("RQ_WORKER_ID") or f"{socket.gethostname()}:{os.getpid()}"


def run_job(job_id: str, attempt: int, node: int | None = None) -> None:
    """Run one attempt of a Launchbay job (its node `node`, for a multi-node job) to its end
    (see `worker.attempt.run_attempt`)."""
    key = (job_id, attempt, node)
    if shutdown_requested() and key not in _claimed:
        # The worker died as this horse started: leave the job queued for another worker
        # (the reaper enqueues it again, its queue entry having ended).
        log.warning("job %s attempt %d: the worker is gone; not started", job_id, attempt)
        return
    settings = current_settings()
    engine = engine_for(settings.resolved_database_url)
    if key in _claimed:
        taken = _claimed.pop(key)
    else:
        taken = take_attempt(
            engine, settings, job_id, attempt, node=node, worker_name=worker_name()
        )
    if taken is None:
        return
    redis = redis_for(settings.redis_url)
    if shutdown_requested():
        # The worker died as this horse started: the attempt it took is lost.
        abandon(engine, redis, settings, taken)
    else:
        run_taken(engine, redis, settings, taken)
