"""P9: the dispatcher (docs/scheduling.md).

- S1 decision time: the planner with 1,000 queued jobs (50 owners, 1 to 8 devices, some
  2-node, three priorities) and 100 simulated workers (8 devices each, most of them busy),
  p50/p99 over 200 decisions; and a whole pass (read the queue, reservations, usage and
  policies from SQLite and 100 worker records from Redis, decide, write) over 50 passes.
- S2 POST → launcher start on an idle worker, dispatcher ÷ FIFO: two stacks side by side,
  rounds alternating, one trivial job at a time (the launcher start is the birth time of the
  attempt's launcher.log, as P6).
- S3 admission throughput with 20 workers: simulated workers (threads that take each task
  from their queue and end the job at once) so that the dispatcher alone is measured; beside
  it, jobs started per second by 4 real workers on this 2-core machine.
- S4 fair share with real workers: owner A submits 40 no-op jobs, then B 10, on 2 one-slot
  workers; when B's first starts against A's 11th, each owner's share of the device-time
  while both wait, and Jain's index of the shares over the weights.
"""

import io
import random
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from redis import Redis
from sqlmodel import Session

from bench.common import MARKER, Result, birth_time, median, percentile
from devstack.services import private_redis
from devstack.stack import Stack
from jobs.spec import JobSpec
from jobs.states import JobState
from service import store
from service.db import make_engine, upgrade_database
from service.models import utcnow
from service.queue import save_worker
from service.scheduling.capacity import dispatch_queue_name
from service.scheduling.dispatcher import Dispatcher
from service.scheduling.executor import wake_dispatcher
from service.scheduling.planner import (
    InUse,
    OwnerUsage,
    QueuedJob,
    WorkerCapacity,
    plan_dispatch,
)
from service.schemas import WorkerRecord
from service.settings import Settings

NOOP = b"print('ok')\n"
DISPATCHER = {"LAUNCHBAY_SCHEDULER": "dispatcher", "LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0"}


@contextmanager
def stack_of(root: Path, redis_url: str, workers: int, **env: str) -> Iterator[Stack]:
    root.mkdir(parents=True, exist_ok=True)
    stack = Stack(
        root=root,
        database_url=f"sqlite:///{root / 'data' / 'launchbay.db'}",
        redis_url=redis_url,
        marker=MARKER,
        extra_env={"LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0", **env},
    )
    try:
        stack.start_api()
        for _ in range(workers):
            stack.start_worker(args=["--slots", "1"])
        yield stack
    finally:
        stack.stop()


def noop_spec(http: httpx.Client, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    upload = http.post("/v1/code", files={"file": ("noop.py", io.BytesIO(NOOP))}, headers=headers)
    upload.raise_for_status()
    code = {"code_id": upload.json()["code_id"], "entrypoint": "noop.py"}
    return {"name": "noop", "code": code, "launcher": "python", "nproc_per_node": 1}


def at(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


# --- S1 ---


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


def register(redis: Redis, name: str, slots: int, queues: tuple[str, ...] = ("default",)) -> None:
    now = utcnow()
    record = WorkerRecord(
        name=name,
        host="bench",
        pid=0,
        queues=list(queues),
        devices=[f"cpu:{i}" for i in range(slots)],
        state="idle",
        started_at=now,
        last_heartbeat=now,
        current_job=None,
        dispatch_queue=dispatch_queue_name(name),
    )
    save_worker(redis, record, ttl_s=3600)


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
            store.create_job(session, spec, owner=f"owner{rng.randrange(50)}")
    for i in range(100):
        register(redis, f"w{i}", 8, ("busy",) if i < 95 else ("default",))
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


# --- S2 ---


def launch_delay(stack: Stack, http: httpx.Client, spec: dict[str, Any]) -> float:
    before = time.time()
    response = http.post("/v1/jobs", json=spec)
    response.raise_for_status()
    job_id = response.json()["id"]
    stack.wait_for_state(http, job_id, {JobState.SUCCEEDED}, timeout=120, interval=0.05)
    launcher_log = stack.data_dir / "runs" / job_id / "attempt-1" / "logs" / "launcher.log"
    return birth_time(launcher_log) - before


def launch_delays(root: Path, redis_url: str, rounds: int = 11) -> tuple[list[float], list[float]]:
    fifo_root, dispatch_root = root / "fifo", root / "dispatch"
    fifo_redis = redis_url.rsplit("/", 1)[0] + "/1"
    fifo: list[float] = []
    dispatched: list[float] = []
    with (
        stack_of(fifo_root, fifo_redis, 1) as plain,
        stack_of(dispatch_root, redis_url, 1, **DISPATCHER) as scheduled,
        plain.client() as plain_http,
        scheduled.client() as scheduled_http,
    ):
        for http in (plain_http, scheduled_http):
            wait_for_workers(http, 1)
        plain_spec, scheduled_spec = noop_spec(plain_http), noop_spec(scheduled_http)
        for _ in range(rounds):
            fifo.append(launch_delay(plain, plain_http, plain_spec))
            time.sleep(0.3)
            dispatched.append(launch_delay(scheduled, scheduled_http, scheduled_spec))
            time.sleep(0.3)
    return fifo[1:], dispatched[1:]


def wait_for_workers(http: httpx.Client, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(http.get("/v1/workers").json()["items"]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} workers came up")
        time.sleep(0.2)


# --- S3 ---


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
                store.take_job(session, job_id, int(attempt))
                store.transition_job(session, job_id, JobState.SUCCEEDED, attempt=int(attempt))
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
        register(redis, name, 1)
    spec = JobSpec.model_validate({"name": "n", "recipe": "synthetic", "nproc_per_node": 1})
    with Session(engine) as session:
        ids = [store.create_job(session, spec, owner=f"o{i % 5}").id for i in range(jobs)]
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


def real_throughput(root: Path, redis_url: str, workers: int = 4, jobs: int = 40) -> float:
    with stack_of(root, redis_url, workers, **DISPATCHER) as stack, stack.client() as http:
        wait_for_workers(http, workers)
        spec = noop_spec(http)
        ids = []
        began = time.time()
        for _ in range(jobs):
            response = http.post("/v1/jobs", json=spec)
            response.raise_for_status()
            ids.append(response.json()["id"])
        ended = [stack.wait_for_state(http, j, {"succeeded"}, timeout=600) for j in ids]
        last_start = max(at(j["started_at"]) for j in ended)
    return jobs / (last_start - began)


# --- S4 ---


def fair_share(root: Path, redis_url: str) -> dict[str, float]:
    with stack_of(root, redis_url, 2, **DISPATCHER) as stack, stack.client() as http:
        wait_for_workers(http, 2)
        tokens = {}
        for owner in ("a", "b"):
            made = http.post("/v1/tokens", json={"name": owner})
            made.raise_for_status()
            tokens[owner] = made.json()["token"]
        specs = {o: noop_spec(http, t) for o, t in tokens.items()}
        ids: dict[str, list[str]] = {"a": [], "b": []}
        for owner, count in (("a", 40), ("b", 10)):
            headers = {"Authorization": f"Bearer {tokens[owner]}"}
            for _ in range(count):
                response = http.post("/v1/jobs", json=specs[owner], headers=headers)
                response.raise_for_status()
                ids[owner].append(response.json()["id"])
        b_submitted = time.time()
        jobs = {
            o: [stack.wait_for_state(http, j, {"succeeded"}, timeout=900) for j in js]
            for o, js in ids.items()
        }
    a_starts = sorted(at(j["started_at"]) for j in jobs["a"])
    b_starts = sorted(at(j["started_at"]) for j in jobs["b"])
    window = (b_submitted, max(at(j["finished_at"]) for j in jobs["b"]))

    def held(owner: str) -> float:
        total = 0.0
        for job in jobs[owner]:
            start, end = (
                max(at(job["started_at"]), window[0]),
                min(at(job["finished_at"]), window[1]),
            )
            total += max(0.0, end - start)
        return total

    a_held, b_held = held("a"), held("b")
    share_a, share_b = a_held / (a_held + b_held), b_held / (a_held + b_held)
    # Jain's index of the shares over equal weights: 1 is perfectly fair, 1/2 the worst.
    x = (share_a / 0.5, share_b / 0.5)
    jain = sum(x) ** 2 / (len(x) * sum(v * v for v in x))
    return {
        "b_first_s": b_starts[0] - a_starts[0],
        "a_11th_s": a_starts[10] - a_starts[0],
        "b_before_a11": float(b_starts[0] < a_starts[10]),
        "share_a": share_a,
        "share_b": share_b,
        "jain": jain,
        "window_s": window[1] - window[0],
    }


def run() -> list[Result]:
    results = []

    def add(result: Result) -> None:
        results.append(result)
        print(result.row(), file=sys.stderr, flush=True)  # as soon as measured

    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-p9-"))
    root.chmod(0o711)
    decide, cpu = decision_times()
    p50, p99 = 1000 * percentile(decide, 50), 1000 * percentile(decide, 99)
    cpu50, cpu99 = 1000 * percentile(cpu, 50), 1000 * percentile(cpu, 99)
    add(
        Result(
            "P9a",
            "dispatch decision, 1,000 queued jobs, 100 workers (simulated capacity)",
            f"wall p50 {p50:.1f} ms, p99 {p99:.1f} ms; CPU p50 {cpu50:.1f} ms, p99 "
            f"{cpu99:.1f} ms ({len(decide)} decisions)",
            "p99 ≤ 50 ms",
            p99 <= 50,
            "the planner alone (service/scheduling/planner.py), 95 workers busy; "
            "CPU = this thread's time, what the wall clock is on an idle core",
        )
    )
    with private_redis() as redis_server:
        first, passes = pass_times(root, redis_server.url(2))
        add(
            Result(
                "P9b",
                "a whole dispatch pass, 1,000 queued jobs, 100 worker records (SQLite, Redis)",
                f"p50 {1000 * percentile(passes, 50):.0f} ms, p99 "
                f"{1000 * percentile(passes, 99):.0f} ms; first pass (writes 1,000 positions) "
                f"{1000 * first:.0f} ms",
                "reported",
                None,
                "read queue, reservations, usage, policies and workers; decide; fence and write",
            )
        )
        fifo, dispatched = launch_delays(root, redis_server.url(0))
        ratio = median(dispatched) / median(fifo)
        add(
            Result(
                "P9c",
                "POST /v1/jobs → launcher start on an idle worker, dispatcher ÷ FIFO",
                f"{ratio:.2f}× ({1000 * median(dispatched):.0f} ms vs "
                f"{1000 * median(fifo):.0f} ms, medians of {len(fifo)})",
                "≤ 1.2×",
                ratio <= 1.2,
                "two stacks side by side, rounds alternating; launcher.log birth time",
            )
        )
        simulated = simulated_throughput(root, redis_server.url(3))
        real = real_throughput(root / "real", redis_server.url(4))
        add(
            Result(
                "P9d",
                "admission throughput, 20 workers",
                f"{simulated:.0f} jobs/s admitted and taken by 20 simulated workers; "
                f"{real:.1f} jobs/s started by 4 real workers on this machine",
                "reported beside Slurm's 500 jobs/s",
                None,
                "simulated workers end each job at once: the dispatcher alone is measured",
            )
        )
        fair = fair_share(root / "fair", redis_server.url(5))
        add(
            Result(
                "P9e",
                "fair share: A submits 40 no-op jobs, then B 10, on 2 one-slot workers",
                f"B's first started {fair['b_first_s']:.1f} s after A's first, A's 11th at "
                f"{fair['a_11th_s']:.1f} s; shares while both waited A {fair['share_a']:.2f}, "
                f"B {fair['share_b']:.2f} over {fair['window_s']:.0f} s; Jain's index "
                f"{fair['jain']:.3f}",
                "B's first before A's 11th; each share within 10% of its weight (0.5)",
                bool(fair["b_before_a11"])
                and abs(fair["share_a"] - 0.5) <= 0.05
                and abs(fair["share_b"] - 0.5) <= 0.05,
                "equal weights; device-time from started_at to finished_at",
            )
        )
    return results
