"""A job that fails on its own while the database is away (SQLite write-locked, PostgreSQL
stopped): its worker keeps the true outcome until the database takes it, and the reaper, which
finds the attempt's heartbeat stale once the database is back, does not call it lost."""

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.db import make_engine
from service.executors.rq import RQExecutor
from service.reaper import ReaperThread
from tests.integration.worker.conftest import WorkerEnv, make_worker_env
from tests.support.outages import DatabaseOutage
from tests.support.procs import wait_until

HEARTBEAT_S = 0.5
LOST_AFTER_S = 2.0
# Longer than the reaper's patience (the attempt's heartbeat is stale when the database is back).
OUTAGE_S = 4.0


@pytest.fixture
def env(tmp_path: Path, database_outage: DatabaseOutage, redis_url: str) -> Iterator[WorkerEnv]:
    for env in make_worker_env(tmp_path, database_outage.url, redis_url):
        env.settings = env.settings.model_copy(
            update={
                "heartbeat_interval_s": HEARTBEAT_S,
                "reaper_interval_s": 0.1,
                "reaper_lost_after_s": LOST_AFTER_S,
            }
        )
        yield env


@pytest.fixture
def reaper(env: WorkerEnv) -> Iterator[ReaperThread]:
    """The reaper as the API runs it, with the API's short wait for the database."""
    engine = make_engine(env.settings.resolved_database_url, wait_s=0.5)
    executor = RQExecutor(env.redis, grace_s=env.settings.cancel_grace_s)
    thread = ReaperThread(engine, executor, env.settings)
    try:
        yield thread
    finally:
        if thread.is_alive():
            thread.stop()
        engine.dispose()


def test_an_outcome_met_by_an_outage_is_recorded_once_the_database_is_back(
    env: WorkerEnv, database_outage: DatabaseOutage, reaper: ReaperThread
) -> None:
    go = env.settings.data_dir / "go"
    job_id = env.submit("fail_when_told.py", launcher="python", args=[str(go)])
    reaper.start()
    with ThreadPoolExecutor(1) as pool:
        attempt = pool.submit(env.run, job_id)
        assert wait_until(lambda: env.job(job_id).state == "running", timeout=60)
        with database_outage.away():
            go.touch()
            time.sleep(OUTAGE_S)
        result = attempt.result(timeout=120)

    job = env.job(job_id)
    assert (job.state, job.exit_reason, job.exit_code) == ("failed", "user_error", 1), job.message
    assert "RuntimeError: failed on its own, as told" in (job.message or "")
    assert result.recorded and not result.retried
    reasons = [e.data.get("exit_reason") for e in env.events(job_id) if e.kind == "state"]
    assert "worker_lost" not in reasons
