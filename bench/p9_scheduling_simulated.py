"""P9 (docs/scheduling.md) without real workers: the planner's decisions on a synthetic
queue (S1), whole dispatch passes against SQLite and Redis, and the admission throughput
with simulated workers that end each job at once (S3), so the dispatcher alone is measured.
"""

import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from redis import Redis
from sqlalchemy import update
from sqlmodel import Session

from devstack.workers import register_worker
from jobs.spec import JobSpec
from jobs.states import JobState
from service import records
from service.db import make_engine, upgrade_database
from service.executors.dispatch import wake_dispatcher
from service.models import Job, utcnow
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


def serve_simulated(database_url: str, redis_url: str, names: list[str]) -> None:
    """Simulated workers (`python -m bench.p9_scheduling_simulated serve ...`): wait on every
    worker's own queue, take all that is there, mark those jobs succeeded in one UPDATE (no
    process, no event: what the dispatcher reads of a job is its state), and wake the
    dispatcher. Their own process, so that the dispatcher's is measured alone."""
    engine = make_engine(database_url)
    redis = Redis.from_url(redis_url)
    keys = [f"rq:queue:{dispatch_queue_name(n)}" for n in names]
    table = Job.__table__  # type: ignore[attr-defined]
    beat_at = 0.0
    while True:
        if time.monotonic() - beat_at > 2:  # their heartbeats: the dispatcher skips silent ones
            for name in names:
                register_worker(redis, name, 1, ttl_s=3600)
            beat_at = time.monotonic()
        popped = redis.blpop(keys, timeout=5)
        if popped is None:
            return  # nothing for 5 s: the benchmark is over
        with redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.lpop(key, 1000)
            more = [task for tasks in pipe.execute() if tasks for task in tasks]
        ids = [task.decode().rsplit("-", 1)[0] for task in [popped[1], *more]]
        now = utcnow()
        with engine.begin() as connection:
            connection.execute(
                update(table)
                .where(table.c.id.in_(ids), table.c.state == JobState.QUEUED.value)
                .values(
                    state=JobState.SUCCEEDED.value, started_at=now, finished_at=now, worker="sim"
                )
            )
        wake_dispatcher(redis)


def simulated_throughput(
    root: Path, redis_url: str, jobs: int = 3000, workers: int = 20
) -> tuple[float, list[float]]:
    """Admissions per second of a dispatcher passing as the API's thread does (woken by the
    workers, else every interval) while `workers` simulated one-slot workers end each job at
    once; and each pass's seconds."""
    url = f"sqlite:///{root / 'throughput.db'}"
    upgrade_database(url)
    settings = Settings(data_dir=root, database_url=url, redis_url=redis_url)
    engine = make_engine(url)
    redis = Redis.from_url(redis_url)
    redis.flushdb()
    names = [f"sim{i}" for i in range(workers)]
    for name in names:
        register_worker(redis, name, 1, ttl_s=3600)
    spec = JobSpec.model_validate({"name": "n", "recipe": "synthetic", "nproc_per_node": 1})
    with Session(engine) as session:
        for i in range(jobs):
            records.create_job(session, spec, owner=f"o{i % 5}")
    dispatcher = Dispatcher(engine, redis, settings)
    lease = dispatcher.keep_lease()
    assert lease is not None
    dispatcher.run_pass(lease)  # the first pass writes every position: not the steady state
    serve = [sys.executable, "-m", "bench.p9_scheduling_simulated", "serve", url, redis_url]
    admitted, passes = 0, []
    simulated = subprocess.Popen([*serve, *names])
    try:
        started = last = time.perf_counter()
        while admitted < jobs - workers:
            began = time.perf_counter()
            now_admitted = len(dispatcher.run_pass(lease).admitted)
            passes.append(time.perf_counter() - began)
            admitted += now_admitted
            if now_admitted:
                last = began
            elif began - last > 30:
                raise RuntimeError(f"nothing admitted for 30 s, {admitted} of {jobs} so far")
            dispatcher.wait_for_wake(settings.dispatch_interval_s)
        took = time.perf_counter() - started
    finally:
        simulated.terminate()
        simulated.wait(timeout=30)
        engine.dispose()
    return admitted / took, passes


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    serve_simulated(sys.argv[2], sys.argv[3], sys.argv[4:])
