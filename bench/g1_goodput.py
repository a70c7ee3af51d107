"""G1/G2: `GET /v1/goodput` over 10,000 jobs that ended in the last 30 days (and 50 running,
whose ledgers are computed as it answers), on SQLite and on PostgreSQL, against listing the
same jobs (`GET /v1/jobs?limit=1000`, the largest page), side by side in the same rounds.

The ended jobs are seeded as the store keeps them: a job row and its stored ledger each
(`job_goodput`, written once at the job's end), with plain bulk INSERTs; the running jobs with
their state events and their attempt's marks, as a worker leaves them."""

import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import insert, text
from sqlalchemy.engine import Engine
from sqlmodel import Session

from bench.common import Result, api_stack
from devstack.services import postgres_database, postgres_server
from jobs.contract.goodput import AttemptMarks, AttemptRecord, job_ledger
from jobs.spec import JobSpec
from service.db import make_engine
from service.models import AttemptMark, Job, JobEvent, JobGoodput
from service.records import ledger_body

ENDED, RUNNING, DAYS = 10_000, 50, 30
GOAL_MS = 200.0
ROUNDS, REQUESTS = 6, 10


def _ledger(i: int, now: float) -> dict[str, Any]:
    """A ledger as the store computes one: queued, a launch, training, a save, some lost."""
    started = now - 600 - i % 300
    marks = AttemptMarks(
        first_step_at=started + 8,
        last_progress_at=started + 500,
        checkpoint_stall_s=12.0 + i % 7,
        checkpoint_saves=5,
        last_checkpoint_at=started + 400,
        ended_at=started + 501,
    )
    record = AttemptRecord(1, started - 30 - i % 60, started, started + 5, started + 503)
    record = AttemptRecord(**{**record.__dict__, "marks": marks, "retried": i % 5 == 0})
    return ledger_body(job_ledger([record], 2 * (1 + i % 4), now), "", final=True)


def seed(engine: Engine) -> None:
    spec = JobSpec(name="seeded", recipe="synthetic", nproc_per_node=2).model_dump(mode="json")
    now = datetime.now(UTC)
    templates = [_ledger(i, now.timestamp()) for i in range(20)]
    with Session(engine) as session:
        for first in range(0, ENDED, 2000):
            jobs, ledgers = [], []
            for i in range(first, min(first + 2000, ENDED)):
                job_id = uuid.uuid4().hex
                ended = now - timedelta(seconds=(DAYS * 86400 - 3600) * i / ENDED + 60)
                owner, queue = f"user-{i % 20}", ("default", "gpu")[i % 2]
                jobs.append(
                    {
                        "id": job_id,
                        "name": f"sweep-{i % 100}",
                        "state": "succeeded" if i % 7 else "failed",
                        "spec": spec,
                        "created_at": ended - timedelta(seconds=700),
                        "finished_at": ended,
                        "attempt": 1,
                        "owner": owner,
                        "queue": queue,
                        "latest_metrics": {},
                        "last_seq": 4,
                    }
                )
                body = {**templates[i % 20], "job_id": job_id}
                seconds = {f"{p['name']}_s": p["seconds"] for p in body["parts"]}
                training = next(p for p in body["parts"] if p["name"] == "training")
                ledgers.append(
                    {
                        "job_id": job_id,
                        "owner": owner,
                        "queue": queue,
                        "name": f"sweep-{i % 100}",
                        "state": "succeeded",
                        "ended_at": ended,
                        "devices": 2,
                        "wall_s": body["wall_s"],
                        "device_s": body["device_s"],
                        "badput_device_s": body["device_s"] - training["device_seconds"],
                        "ledger": body,
                        **seconds,
                    }
                )
            session.execute(insert(Job), jobs)
            session.execute(insert(JobGoodput), ledgers)
            session.commit()
        seed_running(session, spec, now)
        session.execute(text("ANALYZE"))
        session.commit()


def seed_running(session: Session, spec: dict[str, Any], now: datetime) -> None:
    t0 = now.timestamp() - 3600
    for i in range(RUNNING):
        job_id = uuid.uuid4().hex
        session.execute(
            insert(Job).values(
                id=job_id,
                name="running",
                state="running",
                spec=spec,
                created_at=now - timedelta(hours=1),
                started_at=now - timedelta(minutes=59),
                attempt=1,
                owner=f"user-{i % 20}",
                queue="default",
                latest_metrics={},
                last_seq=3,
            )
        )
        states = [("queued", t0), ("starting", t0 + 60), ("running", t0 + 70)]
        events = [
            {
                "job_id": job_id,
                "seq": n + 1,
                "kind": "state",
                "attempt": 1,
                "ts": ts,
                "data": {"state": state},
            }
            for n, (state, ts) in enumerate(states)
        ]
        session.execute(insert(JobEvent), events)
        session.execute(
            insert(AttemptMark).values(
                job_id=job_id,
                attempt=1,
                node=0,
                first_step_at=t0 + 75,
                last_progress_at=now.timestamp() - 1,
                checkpoint_stall_s=30.0,
                checkpoint_saves=10,
                eval_s=0.0,
                evals=0,
            )
        )


def timed(http: httpx.Client, path: str, params: dict[str, str]) -> float:
    began = time.perf_counter()
    http.get(path, params=params).raise_for_status()
    return time.perf_counter() - began


@contextmanager
def _database(server: str | None) -> Iterator[str | None]:
    if server is None:
        yield None
        return
    with postgres_database(server) as url:
        yield url


def measure(server: str | None) -> tuple[float, float, int]:
    """p50 of `GET /v1/goodput?since=30d` and of `GET /v1/jobs?limit=1000`, in alternating
    rounds on one stack; and how many jobs the goodput answer counted."""
    with _database(server) as url, api_stack(url) as stack, stack.client() as http:
        engine = make_engine(stack.database_url)
        try:
            seed(engine)
        finally:
            engine.dispose()
        goodput: list[float] = []
        listing: list[float] = []
        counted = http.get("/v1/goodput", params={"since": "30d"}).json()["jobs"]
        for _ in range(ROUNDS):
            for _ in range(REQUESTS):
                goodput.append(timed(http, "/v1/goodput", {"since": "30d"}))
                listing.append(timed(http, "/v1/jobs", {"limit": "1000"}))
    return 1000 * statistics.median(goodput), 1000 * statistics.median(listing), counted


def result(id_: str, database: str, goodput_ms: float, listing_ms: float, counted: int) -> Result:
    return Result(
        id_,
        f"`GET /v1/goodput?since=30d` over {ENDED:,} ended + {RUNNING} running jobs, "
        f"{database}: p50, ÷ `GET /v1/jobs?limit=1000` of the same jobs",
        f"{goodput_ms:.1f} ms ({goodput_ms / listing_ms:.2f}× the listing's {listing_ms:.1f} ms)",
        f"≤ {GOAL_MS:.0f} ms",
        goodput_ms <= GOAL_MS and counted == ENDED + RUNNING,
        f"{ROUNDS} alternating rounds of {REQUESTS} requests each; {counted:,} jobs counted; "
        "ended jobs from their stored ledgers (one grouped query), running ones computed",
    )


def run() -> list[Result]:
    sq = measure(None)
    with postgres_server() as server:
        pg = measure(server)
    return [result("G1", "SQLite", *sq), result("G2", "PostgreSQL", *pg)]
