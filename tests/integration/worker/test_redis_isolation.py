"""A job cannot reach the queue's Redis: with a password-protected Redis (as the compose stack
and docs/security.md set it up), a real RQ worker takes and runs the job through it, while the
job itself, trying every password it can find, gets nothing but NOAUTH."""

import json
import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rq.job import Job as RQJob
from rq.job import JobStatus

from service.db import session_scope
from service.executors.rq import enqueue_attempt, rq_job_id
from service.hardening import harden_service
from service.models import Job
from tests.integration.worker.conftest import WorkerEnv, make_worker_env
from tests.support.services import RedisServer, private_redis
from worker.isolation import can_switch_users
from worker.rq_worker import run_worker

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="job users need a root worker")
PASSWORD = secrets.token_urlsafe(24)


@pytest.fixture
def guarded_redis() -> Iterator[RedisServer]:
    with private_redis(password=PASSWORD) as server:
        yield server


@pytest.fixture
def guarded_wenv(
    tmp_path: Path, sqlite_url: str, guarded_redis: RedisServer
) -> Iterator[WorkerEnv]:
    yield from make_worker_env(tmp_path, sqlite_url, guarded_redis.url(0))


def test_a_job_finds_no_way_into_redis_while_the_worker_uses_it(
    guarded_wenv: WorkerEnv, guarded_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wenv = guarded_wenv
    # In the worker's environment, as `launchbay worker` has it.
    monkeypatch.setenv("LAUNCHBAY_REDIS_URL", guarded_redis.url(0))
    harden_service(wenv.settings.data_dir.resolve(), wenv.settings.resolved_database_url)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = {
        "SNOOP_REDIS_PORT": str(guarded_redis.port),
        "SNOOP_DATA_DIR": str(wenv.settings.data_dir.resolve()),
    }
    job_id = wenv.submit(
        "redis_probe.py", launcher="python", nproc_per_node=1, queue=queue, env=env
    )
    with session_scope(wenv.engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        enqueue_attempt(wenv.redis, job, grace_s=wenv.settings.cancel_grace_s)

    assert run_worker([queue], burst=True, settings=wenv.settings, name=f"w-{queue}")

    job = wenv.job(job_id)
    assert job.state == "succeeded", job.message
    rq_job = RQJob.fetch(rq_job_id(job_id, 1), connection=wenv.redis)
    assert rq_job.get_status() == JobStatus.FINISHED  # the worker went through Redis
    report_file = wenv.settings.data_dir.resolve() / "artifacts" / job_id / "redis-probe.json"
    text = report_file.read_text()
    report = json.loads(text)
    assert report["uid"] not in (0, os.getuid())
    assert report["tried"] > 1  # without a password, and with what it gathered
    assert PASSWORD not in text
    for reply in report["replies"]:
        assert reply["auth"] == "" or reply["auth"].startswith(("-WRONGPASS", "-ERR")), reply
        for answer in (reply["ping"], reply["keys"], reply["get"]):
            assert answer.startswith("-NOAUTH"), reply
