"""P9 (docs/scheduling.md) without real workers: the planner's decisions on a synthetic
queue (S1), whole dispatch passes against SQLite and Redis, and the admission throughput
with simulated workers that end each job at once (S3), so the dispatcher alone is measured.
"""

import random
import threading
import time
from pathlib import Path
from typing import Any

from redis import Redis
from sqlmodel import Session

from devstack.workers import register_worker
from jobs.spec import JobSpec
from jobs.states import JobState
from service import records
from service.db import make_engine, upgrade_database
from service.executors.dispatch import wake_dispatcher
from service.scheduling.capacity import dispatch_queue_name
from service.scheduling.dispatcher import Dispatcher
from service.scheduling.planner import (
    InUse,
    OwnerUsage,
    QueuedJob,
    WorkerCapacity,
    plan_dispatch,
)
from service.settings import Settings


def synthetic_queue(jobs: int, workers: int, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    pools = [
        WorkerCapacity(f"w{i}", frozenset({"default"}), tuple(f"{d}" for d in range(8)))
        for i in range(workers)
    ]
    in_use = [InUse(p.name, p.devices[: rng.choice((4, 6, 8))]) for p in pools[: workers - 5]]
    now = time.time()
    queued = [
        QueuedJob(
            f"j{i}",
            1,
            f"owner{rng.randrange(50)}",
            "default",
            rng.choice((0, 0, 0, 1, 5)),
            2 if rng.random() < 0.1 else 1,
            rng.choice((1, 2, 4, 8)),
            now - rng.uniform(0, 3600),
        )
        for i in range(jobs)
    ]
    usage = {f"owner{i}": OwnerUsage(rng.randrange(8), rng.uniform(0, 1e5)) for i in range(50)}
    return {"jobs": queued, "workers": pools, "in_use": in_use, "usage": usage, "now": now}


def decision_times(rounds: int = 200) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU seconds (this thread's) of each decision: on a machine shared with
    other work, the wall clock also counts the time the scheduler gave to others."""
    scene = synthetic_queue(1000, 100)
    times, cpu = [], []
    for _ in range(rounds):
        started, started_cpu = time.perf_counter(), time.thread_time()
        plan_dispatch(
            scene["jobs"],
            scene["workers"],
            scene["in_use"],
            scene["usage"],
            {},
            now=scene["now"],
            starvation_after_s=600,
            quota_period_s=86400,
        )
        times.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - started_cpu)
    return times, cpu


def pass_times(root: Path, redis_url: str, passes: int = 50) -> tuple[float, list[float]]:
    """A first pass (writes 1,000 positions), then passes that change little."""
    url = f"sqlite:///{root / 'passes.db'}"
    upgrade_database(url)
    settings = Settings(data_dir=root, database_url=url, redis_url=redis_url)
    settings = settings.model_copy(update={"scheduler": "dispatcher"})
    engine = make_engine(url)
    redis = Redis.from_url(redis_url)
    rng = random.Random(3)
    with Session(engine) as session:
        for i in range(1000):
            spec = JobSpec.model_validate(
                {"name": f"j{i}", "recipe": "synthetic", "nproc_per_node": rng.choice((1, 2, 4, 8))}
            )
            records.create_job(session, spec, owner=f"owner{rng.randrange(50)}")
    for i in range(100):
        register_worker(redis, f"w{i}", 8, ("busy",) if i < 95 else ("default",), ttl_s=3600)
    dispatcher = Dispatcher(engine, redis, settings)
    lease = dispatcher.keep_lease()
    assert lease is not None
    started = time.perf_counter()
    dispatcher.run_pass(lease)
    first = time.perf_counter() - started
    times = []
    for _ in range(passes):
        started = time.perf_counter()
        dispatcher.run_pass(lease)
        times.append(time.perf_counter() - started)
    engine.dispose()
    return first, times


class SimulatedWorkers:
    """Threads that each pop their worker's queue and end the job at once (no process)."""

    def __init__(self, engine: Any, redis_url: str, names: list[str]) -> None:
        self.engine, self.redis_url, self.names = engine, redis_url, names
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.serve, args=(n,)) for n in names]

    def serve(self, name: str) -> None:
        redis = Redis.from_url(self.redis_url)
        key = f"rq:queue:{dispatch_queue_name(name)}"
        while not self.stopping.is_set():
            popped = redis.blpop([key], timeout=0.2)
            if popped is None:
                continue
            job_id, attempt = popped[1].decode().rsplit("-", 1)
            with Session(self.engine) as session:
                records.take_job(session, job_id, int(attempt))
                records.transition_job(session, job_id, JobState.SUCCEEDED, attempt=int(attempt))
            wake_dispatcher(redis)

    def __enter__(self) -> "SimulatedWorkers":
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join()


def simulated_throughput(root: Path, redis_url: str, jobs: int = 600) -> float:
    url = f"sqlite:///{root / 'throughput.db'}"
    upgrade_database(url)
    settings = Settings(data_dir=root, database_url=url, redis_url=redis_url).model_copy(
        update={"scheduler": "dispatcher"}
    )
    engine = make_engine(url)
    redis = Redis.from_url(redis_url)
    redis.flushdb()
    names = [f"sim{i}" for i in range(20)]
    for name in names:
        register_worker(redis, name, 1, ttl_s=3600)
    spec = JobSpec.model_validate({"name": "n", "recipe": "synthetic", "nproc_per_node": 1})
    with Session(engine) as session:
        ids = [records.create_job(session, spec, owner=f"o{i % 5}").id for i in range(jobs)]
    dispatcher = Dispatcher(engine, redis, settings)
    lease = dispatcher.keep_lease()
    assert lease is not None
    admitted = 0
    with SimulatedWorkers(engine, redis_url, names):
        started = time.perf_counter()
        while admitted < len(ids):
            admitted += len(dispatcher.run_pass(lease).admitted)
            redis.blpop(["launchbay:dispatch:wake"], timeout=0.05)
        took = time.perf_counter() - started
    engine.dispose()
    return admitted / took
