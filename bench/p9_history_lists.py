"""F5/F6 (see `bench.p9_history`): `GET /v1/jobs` and its filters at 100,000 jobs ÷ at 1,000,
on SQLite and on PostgreSQL; the job rows are seeded with plain bulk INSERTs."""

import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import insert, text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from bench.common import api_stack
from devstack.services import postgres_database
from jobs.spec import JobSpec
from jobs.states import JobState
from service.db import make_engine
from service.models import Job, JobTag

STATES = ("queued", "succeeded", "failed", "cancelled")
SMALL_JOBS, BIG_JOBS = 1000, 100_000


def seed_jobs(engine: Engine, count: int, start: int) -> None:
    """`count` job rows (and their tags) in plain bulk INSERTs, newer than those before."""
    spec = JobSpec(name="seeded", recipe="synthetic").model_dump(mode="json")
    base = datetime(2026, 1, 1, tzinfo=UTC)
    with Session(engine) as session:
        for first in range(start, start + count, 5000):
            jobs, tags = [], []
            for i in range(first, min(first + 5000, start + count)):
                job_id = uuid.uuid4().hex
                created = base + timedelta(seconds=i)
                team = f"team-{i % 10}"
                jobs.append(
                    {
                        "id": job_id,
                        "name": f"sweep-{i % 100}",
                        "state": STATES[i % 4],
                        "spec": {**spec, "tags": {"team": team}},
                        "created_at": created,
                        "attempt": 1,
                        "owner": f"user-{i % 20}",
                        "queue": "default",
                        "latest_metrics": {},
                        "last_seq": 1,
                    }
                )
                tags.append({"job_id": job_id, "key": "team", "value": team, "created_at": created})
            session.execute(insert(Job), jobs)
            session.execute(insert(JobTag), tags)
            session.commit()
        session.execute(text("ANALYZE"))
        session.commit()


LIST_QUERIES: dict[str, dict[str, str]] = {
    "state": {"state": "queued", "limit": "50"},
    "owner": {"owner": "user-7", "limit": "50"},
    "owner+state": {"owner": "user-7", "state": "failed", "limit": "50"},
    "tag": {"tag": "team=team-3", "limit": "50"},
    "name": {"name": "sweep-42", "limit": "50"},
}


def list_times(http: httpx.Client, count: int) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for label, params in LIST_QUERIES.items():
        for _ in range(count):
            began = time.perf_counter()
            http.get("/v1/jobs", params=params).raise_for_status()
            found.setdefault(label, []).append(time.perf_counter() - began)
    return found


def list_growth(server: str | None) -> tuple[dict[str, float], dict[str, float], str]:
    """p50 of each filter at SMALL_JOBS and at BIG_JOBS jobs: two stacks side by side, their
    requests alternating in rounds so the machine's other loads hit both alike; and the
    PostgreSQL plan of the state filter at BIG_JOBS."""
    with (
        _database(server) as small_url,
        _database(server) as big_url,
        api_stack(small_url) as small_stack,
        api_stack(big_url) as big_stack,
        small_stack.client() as small_http,
        big_stack.client() as big_http,
    ):
        for stack, count in ((small_stack, SMALL_JOBS), (big_stack, BIG_JOBS)):
            engine = make_engine(stack.database_url)
            try:
                seed_jobs(engine, count, 0)
            finally:
                engine.dispose()
        plan = state_plan(big_stack.database_url)
        times: dict[str, dict[str, list[float]]] = {"small": {}, "big": {}}
        for _ in range(6):
            for size, http in (("small", small_http), ("big", big_http)):
                for label, values in list_times(http, 25).items():
                    times[size].setdefault(label, []).extend(values)
    small = {k: 1000 * statistics.median(v) for k, v in times["small"].items()}
    big = {k: 1000 * statistics.median(v) for k, v in times["big"].items()}
    return small, big, plan


@contextmanager
def _database(server: str | None) -> Iterator[str | None]:
    """A fresh PostgreSQL database on `server`, or None (the stack's own SQLite file)."""
    if server is None:
        yield None
        return
    with postgres_database(server) as url:
        yield url


def state_plan(url: str) -> str:
    """The top plan node of the state filter's page query (its index, no sort)."""
    from service.records.job_rows import job_list_query

    engine = make_engine(url)
    try:
        stmt, _ = job_list_query(state=JobState.QUEUED)
        sql = str(stmt.limit(50).compile(engine, compile_kwargs={"literal_binds": True}))
        with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                rows = connection.execute(text(f"EXPLAIN QUERY PLAN {sql}")).all()
                return "; ".join(str(row[-1]) for row in rows)
            rows = connection.execute(text(f"EXPLAIN ANALYZE {sql}")).all()
            lines = [row[0].strip() for row in rows]
            scans = [line.split("  (")[0].lstrip("-> ") for line in lines if "Scan" in line]
            took = [line for line in lines if line.startswith("Execution Time")]
            return "; ".join([*scans, *took])
    finally:
        engine.dispose()
