"""F4, F7, F8, F9 (see `bench.p9_history`): one job with a large output (a job page's reads,
the bytes a stored log byte costs, the store's write rate with rollups) and the connections
an idle worker holds. A job's output is seeded with the store's own batch writes, as the
worker writes it."""

import statistics
import tempfile
import time

import httpx
import psutil
from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from bench.common import NO_CHECKPOINTS, api_stack, upload_code
from devstack.services import postgres_database
from devstack.stack import Stack
from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service import records
from service.db import make_engine, upgrade_database
from service.records import outputs

BIG_POINTS, BIG_LINES = 1_000_000, 500_000
LOG_LINE = "epoch 3 step {step} loss=0.123456 lr=0.000100 grad_norm=1.2345 samples/s=1234.5"


def running_job(engine: Engine, name: str) -> str:
    with Session(engine, expire_on_commit=False) as session:
        job = records.create_job(session, JobSpec(name=name, recipe="synthetic"))
        records.transition_job(session, job.id, JobState.STARTING, attempt=1)
        records.transition_job(session, job.id, JobState.RUNNING, attempt=1)
        return job.id


def seed_output(engine: Engine, job_id: str, points: int, lines: int) -> int:
    """Write `points` metric points (4 names) and `lines` log lines in batches, as the worker
    does; returns the log bytes written."""
    names = ("loss", "accuracy", "lr", "grad_norm")
    steps = points // len(names)
    logged = 0
    with Session(engine) as session:
        step = 0
        while step < steps or logged < lines:
            batch_points = [
                records.NewMetricPoint(s, s // 1000, name, 1.0 / (1 + s) + (i % 7) * 1e-3, float(s))
                for s in range(step, min(step + 1000, steps))
                for i, name in enumerate(names)
            ]
            take = min(2000, lines - logged)
            batch_logs = [
                records.NewLogLine(0, float(step), LOG_LINE.format(step=logged + k))
                for k in range(take)
            ]
            logged += take
            step += 1000
            records.append_output(session, job_id, 1, logs=batch_logs, points=batch_points)
        records.transition_job(
            session, job_id, JobState.SUCCEEDED, attempt=1, exit_reason=ExitReason.COMPLETED
        )
    return sum(len(LOG_LINE.format(step=k)) for k in range(lines))


PAGE_REQUESTS: dict[str, tuple[str, dict[str, str | int]]] = {
    "job": ("", {}),
    "timeline": ("/timeline", {}),
    "metrics": ("/metrics", {"max_points": 1000}),
    "logs": ("/logs", {"order": "desc", "limit": 200}),
}


def page_seconds(http: httpx.Client, job_id: str) -> dict[str, float]:
    """Seconds each request of a job page took (what the dashboard reads before following
    the stream)."""
    took: dict[str, float] = {}
    for label, (suffix, params) in PAGE_REQUESTS.items():
        began = time.perf_counter()
        http.get(f"/v1/jobs/{job_id}{suffix}", params=params).raise_for_status()
        took[label] = time.perf_counter() - began
    return took


def sqlite_bytes(engine: Engine) -> int:
    with engine.connect() as connection:
        pages = connection.execute(text("PRAGMA page_count")).scalar_one()
        free = connection.execute(text("PRAGMA freelist_count")).scalar_one()
        size = connection.execute(text("PRAGMA page_size")).scalar_one()
    return int((pages - free) * size)


def job_page() -> tuple[dict[str, dict[str, float]], float]:
    """F4 and F7 on SQLite: median seconds of each page request (and of the whole page,
    "page") of the big, small and at-the-limit jobs, and the bytes per stored log byte."""
    with api_stack() as stack, stack.client() as http:
        engine = make_engine(stack.database_url)
        try:
            logs_only = running_job(engine, "logs")
            before = sqlite_bytes(engine)
            log_bytes = seed_output(engine, logs_only, points=0, lines=BIG_LINES // 2)
            per_log_byte = (sqlite_bytes(engine) - before) / log_bytes
            jobs = {"small": running_job(engine, "small"), "limit": running_job(engine, "limit")}
            seed_output(engine, jobs["small"], points=1000, lines=1000)
            seed_output(engine, jobs["limit"], points=4000, lines=1000)
            jobs["big"] = running_job(engine, "big")
            seed_output(engine, jobs["big"], points=BIG_POINTS, lines=BIG_LINES)
            times: dict[str, dict[str, list[float]]] = {name: {} for name in jobs}
            for round_ in range(18):  # the first 3 warm up
                for name, job_id in jobs.items():
                    took = page_seconds(http, job_id)
                    if round_ >= 3:
                        for label, seconds in {**took, "page": sum(took.values())}.items():
                            times[name].setdefault(label, []).append(seconds)
            points = http.get(f"/v1/jobs/{jobs['big']}/metrics", params={"max_points": 1000})
            if len(points.json()["items"]) > 4000:
                raise RuntimeError(f"F4: {len(points.json()['items'])} points for 4 charts")
        finally:
            engine.dispose()
    medians = {
        name: {label: statistics.median(t) for label, t in each.items()}
        for name, each in times.items()
    }
    return medians, per_log_byte


def postgres_costs(server: str) -> tuple[float, int]:
    """F7 and F8 on PostgreSQL."""
    with postgres_database(server) as url, api_stack(url) as stack, stack.client() as http:
        engine = make_engine(url)
        try:
            job_id = running_job(engine, "logs")
            log_bytes = seed_output(engine, job_id, points=0, lines=BIG_LINES // 5)
            with engine.connect() as connection:
                size = connection.execute(
                    text("SELECT pg_total_relation_size('log_line')")
                ).scalar_one()
            stack.start_worker()
            held = idle_worker_connections(stack, http)
        finally:
            engine.dispose()
    return size / log_bytes, held


def idle_worker_connections(stack: Stack, http: httpx.Client) -> int:
    """Connections to PostgreSQL the worker's processes hold once idle after a job."""
    code_id = upload_code(http, "lines.py", "print('hello')\n")
    spec = {
        "name": "one-line",
        "code": {"code_id": code_id, "entrypoint": "lines.py"},
        "launcher": "python",
        "nproc_per_node": 1,
        "checkpoint": NO_CHECKPOINTS,
    }
    job_id = http.post("/v1/jobs", json=spec).json()["id"]
    stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120, interval=0.2)
    time.sleep(3.0)  # the horse is gone, the worker idle
    worker = psutil.Process(stack.workers[0].pid)
    held = 0
    for proc in [worker, *worker.children(recursive=True)]:
        held += sum(1 for c in proc.net_connections("tcp") if c.raddr and c.raddr.port == 5432)
    return held


def ingest_cost(rounds: int = 6, steps: int = 2500) -> tuple[float, float]:
    """F9: metric points/s the store writes in the worker's batches (5,000 rows, 20 metrics a
    step), with the rollups kept and with them left out, alternating on one SQLite file."""
    url = f"sqlite:///{tempfile.mkdtemp(prefix='launchbay-bench-')}/ingest.db"
    upgrade_database(url)
    engine = make_engine(url)
    kept = outputs.add_to_rollups
    rates: dict[bool, list[float]] = {True: [], False: []}
    try:
        for round_ in range(rounds):
            for with_rollups in (True, False):
                outputs.add_to_rollups = kept if with_rollups else (lambda *a, **k: None)  # type: ignore[assignment]
                job_id = running_job(engine, f"ingest-{round_}")
                points = [
                    records.NewMetricPoint(step, 0, f"m{i:02d}", step + i / 100, float(step))
                    for step in range(steps)
                    for i in range(20)
                ]
                began = time.perf_counter()
                with Session(engine) as session:
                    for first in range(0, len(points), 5000):
                        records.append_output(
                            session, job_id, 1, points=points[first : first + 5000]
                        )
                rates[with_rollups].append(len(points) / (time.perf_counter() - began))
    finally:
        outputs.add_to_rollups = kept  # type: ignore[assignment]
        engine.dispose()
    return statistics.median(rates[True]), statistics.median(rates[False])
