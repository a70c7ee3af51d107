"""What a worker process owns for the attempts it runs: its settings, one database engine per
URL, one Redis client and the executor on it, its fork servers and its watchdog.

RQ calls `worker.tasks.run_job` by name, so the task finds the worker's context through
`worker.tasks`; nothing else in the worker is global.
"""

import logging
import os
from dataclasses import dataclass, field

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from sqlalchemy.engine import Engine

from service.db import make_engine
from service.executors.base import Executor
from service.executors.registry import make_executor
from service.settings import Settings, get_settings
from worker.warm_pool import WarmPool, WarmUnavailable, pool_directory
from worker.watchdog import Watchdog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptServices:
    """What running one attempt needs from its worker."""

    engine: Engine
    settings: Settings
    # Submits the job's next attempt when this one ends in a retry.
    executor: Executor
    # The worker's fork servers, for warm starts (None: every attempt starts cold).
    warm_pool: WarmPool | None = None


@dataclass
class WorkerContext:
    """Owned by one worker process."""

    configured: Settings | None = None
    engines: dict[str, tuple[Engine, int]] = field(default_factory=dict)
    redis_clients: dict[str, Redis] = field(default_factory=dict)
    # The process the fork servers live as long as: the worker that made this context.
    owner_pid: int = field(default_factory=os.getpid)
    warm: WarmPool | None = None
    # Told which attempt runs, to record it lost if the worker dies (none: nobody is).
    watchdog: Watchdog = field(default_factory=lambda: Watchdog(None))

    @property
    def settings(self) -> Settings:
        return self.configured or get_settings()

    def engine(self) -> Engine:
        """This process's engine for the database, made once (again in a forked child: no
        pooled connection crosses a fork)."""
        url = self.settings.resolved_database_url
        found = self.engines.get(url)
        if found is not None and found[1] == os.getpid():
            return found[0]
        engine = make_engine(url, pooled=False)
        self.engines[url] = (engine, os.getpid())
        return engine

    def redis(self) -> Redis:
        """This process's client for supervising jobs, made once. Few retries: a supervisor
        must not stall on a Redis that is away (it copes)."""
        url = self.settings.redis_url
        client = self.redis_clients.get(url)
        if client is None:
            client = Redis.from_url(
                url,
                socket_timeout=5,
                socket_connect_timeout=2,
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.1), 1),
            )
            self.redis_clients[url] = client
        return client

    def warm_pool(self) -> WarmPool | None:
        """The worker's fork servers; None where warm starts are off or no private directory
        can be had for them."""
        settings = self.settings
        if not settings.warm_start:
            return None
        if self.warm is None:
            try:
                directory = pool_directory(settings.job_user_lease_dir, self.owner_pid)
            except WarmUnavailable as exc:
                log.warning("no warm starts: %s", exc)
                return None
            self.warm = WarmPool(directory, self.owner_pid, settings.warm_idle_s)
        return self.warm

    def services(self) -> AttemptServices:
        settings = self.settings
        engine = self.engine()
        executor = make_executor(settings, self.redis(), engine)
        return AttemptServices(engine, settings, executor, self.warm_pool())
