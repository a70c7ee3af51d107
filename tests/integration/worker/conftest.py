"""The worker against a real database, a real Redis and real torchrun, no RQ unless a test asks.

Test programs live in `scripts/`; `WorkerEnv.submit` uploads one the way the code route will
(an unpacked directory under `<data>/code/<code_id>/`) and creates a job that runs it.
After every test, no process of a job it created may be alive.
"""

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from jobs.spec import JobSpec
from jobs.states import AttemptRef
from service.db import make_engine, session_scope, upgrade_database
from service.executors.rq import RQExecutor
from service.models import Checkpoint, Job, JobEvent, LogLine, MetricPoint
from service.records import create_job, list_checkpoints
from service.settings import Settings
from tests.integration.conftest import copy_migrated_sqlite
from tests.support.attempts import run_attempt
from tests.support.isolation import reachable_by_job_users
from tests.support.procs import job_processes
from worker.attempt import AttemptResult
from worker.context import AttemptServices
from worker.prepare import CudaInfo
from worker.warm_pool import WarmPool

SCRIPTS = Path(__file__).parent / "scripts"
NO_CUDA = CudaInfo(available=False, device_count=0)


def recorded_alive(data_dir: Path) -> list[int]:
    """Live processes that are recorded in a pids.json of an attempt (same PID, same start
    time) or that are in a session or process group of a recorded one."""
    records = [
        record
        for pids_file in data_dir.glob("runs/*/attempt-*/pids.json")
        for record in json.loads(pids_file.read_text())
    ]
    groups = {r["sid"] for r in records} | {r["pgid"] for r in records}
    groups -= {os.getsid(0), os.getpgid(0)}
    started = {r["pid"]: r["create_time"] for r in records}
    alive = []
    for proc in psutil.process_iter(["pid", "status", "create_time"]):
        pid, info = proc.info["pid"], proc.info
        if info["status"] == psutil.STATUS_ZOMBIE or pid == os.getpid():
            continue
        try:
            same = pid in started and abs(started[pid] - info["create_time"]) < 0.01
            if same or os.getsid(pid) in groups or os.getpgid(pid) in groups:
                alive.append(pid)
        except ProcessLookupError:
            continue
    return alive


@dataclass
class WorkerEnv:
    settings: Settings
    engine: Engine
    redis: Redis
    job_ids: set[str] = field(default_factory=set)
    # The test process's fork servers: attempts of a spec that names no launcher start warm.
    warm_pool: WarmPool | None = None

    def submit(self, script: str, *, entrypoint: str | None = None, **spec: Any) -> str:
        """Upload `scripts/<script>` (unless done already) and create a job that runs it."""
        code_id = hashlib.sha256(script.encode()).hexdigest()
        target = self.settings.code_dir / code_id
        if not target.exists():
            target.mkdir(parents=True)
            shutil.copy(SCRIPTS / script, target / script)
        fields: dict[str, Any] = {"name": f"test-{script}", "nproc_per_node": 2}
        fields.update(spec)
        code = {"code_id": code_id, "entrypoint": entrypoint or script}
        job_spec = JobSpec(code=code, **fields)
        with session_scope(self.engine) as session:
            job_id = create_job(session, job_spec).id
        self.job_ids.add(job_id)
        return job_id

    def services(self) -> AttemptServices:
        executor = RQExecutor(self.redis, grace_s=self.settings.cancel_grace_s)
        return AttemptServices(self.engine, self.settings, executor, self.warm_pool)

    def run(self, job_id: str, attempt: int = 1) -> AttemptResult:
        result = run_attempt(
            self.services(),
            AttemptRef(job_id, attempt),
            worker_name="test-worker",
            cuda=NO_CUDA,
        )
        assert result is not None
        return result

    def job(self, job_id: str) -> Job:
        with session_scope(self.engine) as session:
            job = session.get(Job, job_id)
            assert job is not None
            return job

    def rows(self, table: Any, job_id: str) -> list[Any]:
        with session_scope(self.engine) as session:
            stmt = select(table).where(table.job_id == job_id).order_by(col(table.seq))
            return list(session.exec(stmt).all())

    def logs(self, job_id: str) -> list[LogLine]:
        return self.rows(LogLine, job_id)

    def metrics(self, job_id: str) -> list[MetricPoint]:
        return self.rows(MetricPoint, job_id)

    def checkpoints(self, job_id: str) -> list[Checkpoint]:
        """The live checkpoints (retired ones keep their rows, for the event history)."""
        with session_scope(self.engine) as session:
            return list_checkpoints(session, job_id)

    def events(self, job_id: str) -> list[JobEvent]:
        return self.rows(JobEvent, job_id)


def make_worker_env(
    tmp_path: Path, database_url: str, redis_url: str, warm_pool: WarmPool | None = None
) -> Iterator[WorkerEnv]:
    upgrade_database(database_url)
    settings = Settings(
        data_dir=reachable_by_job_users(tmp_path / "data"),
        database_url=database_url,
        redis_url=redis_url,
        cancel_grace_s=2.0,
        worker_poll_s=0.1,
    )
    engine = make_engine(database_url)
    redis = Redis.from_url(redis_url)
    env = WorkerEnv(settings, engine, redis, warm_pool=warm_pool)
    try:
        yield env
        assert_nothing_left(env)
    finally:
        for proc in job_processes(*env.job_ids):
            proc.kill()
        redis.close()
        engine.dispose()


def assert_nothing_left(env: WorkerEnv) -> None:
    left = [f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in job_processes(*env.job_ids)]
    assert not left, f"processes of the test's jobs are still alive: {left}"
    assert not recorded_alive(env.settings.data_dir)


@pytest.fixture(scope="session")
def warm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    """One set of fork servers for the test process (as a worker keeps one), stopped at its
    end; the default environment's is started at once, while the first test prepares."""
    directory = tmp_path_factory.mktemp("warm")
    directory.chmod(0o700)
    pool = WarmPool(directory, os.getpid(), idle_s=600.0)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def wenv(
    tmp_path: Path,
    sqlite_url: str,
    migrated_sqlite_file: Path,
    redis_url: str,
    warm_pool: WarmPool,
) -> Iterator[WorkerEnv]:
    """On a copy of the SQLite file migrated once per test process (`copy_migrated_sqlite`)."""
    copy_migrated_sqlite(migrated_sqlite_file, sqlite_url)
    yield from make_worker_env(tmp_path, sqlite_url, redis_url, warm_pool)


@pytest.fixture
def pg_wenv(
    tmp_path: Path, postgres_url: str, redis_url: str, warm_pool: WarmPool
) -> Iterator[WorkerEnv]:
    yield from make_worker_env(tmp_path, postgres_url, redis_url, warm_pool)
