"""The dispatcher with real workers (issue 34): a worker frozen (SIGSTOP) after a job was
admitted onto it, then killed, before it took the job. The job is admitted again onto the
worker left, as its next attempt, and the jobs behind it run there too; before the fix it
stayed `queued` for good and kept the free worker from them.

One real worker process per worker, the dispatcher's own thread, a real database (SQLite and
PostgreSQL) and a real Redis; tests/integration/test_dispatch_recovery.py has the other ways
an admission can be lost."""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from service.scheduling.capacity import active_reservations
from service.scheduling.dispatcher import DispatcherThread
from service.worker_records import worker_key
from tests.integration.worker.conftest import WorkerEnv
from tests.support.procs import start, stop, wait_until


def start_worker(wenv: WorkerEnv, queue: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    settings = wenv.settings
    env = {
        **os.environ,
        "LAUNCHBAY_DATA_DIR": str(settings.data_dir),
        "LAUNCHBAY_DATABASE_URL": str(settings.database_url),
        "LAUNCHBAY_REDIS_URL": settings.redis_url,
        "LAUNCHBAY_HEARTBEAT_INTERVAL_S": "1",
        "LAUNCHBAY_WORKER_POLL_S": "0.1",
    }
    code = f"from worker.rq_worker import run_worker; run_worker([{queue!r}], name={name!r})"
    return start([sys.executable, "-c", code], env, log)


@pytest.fixture(params=["wenv", "pg_wenv"])
def env(request: pytest.FixtureRequest) -> WorkerEnv:
    found: WorkerEnv = request.getfixturevalue(request.param)
    return found


def test_a_job_admitted_onto_a_worker_frozen_then_killed_runs_elsewhere(
    env: WorkerEnv, tmp_path: Path
) -> None:
    queue, suffix = f"test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    names = (f"a-frozen-{suffix}", f"b-left-{suffix}")
    frozen, left = (start_worker(env, queue, n, tmp_path / f"{n}.log") for n in names)
    dispatcher = DispatcherThread(env.engine, env.settings)

    def logs() -> str:
        return "\n".join((tmp_path / f"{n}.log").read_text() for n in names)

    def reserved_on(worker: str) -> list[str]:
        with env.engine.connect() as connection:
            return [r.job_id for r in active_reservations(connection) if r.worker == worker]

    try:
        assert wait_until(lambda: env.redis.exists(*map(worker_key, names)) == 2, 60), logs()
        os.kill(frozen.pid, signal.SIGSTOP)
        spec = {"launcher": "python", "nproc_per_node": 1, "queue": queue}
        jobs = [env.submit("single.py", **spec) for _ in range(3)]
        dispatcher.start()
        # One of the two oldest jobs goes to the frozen worker, the other runs on the other.
        assert wait_until(lambda: len(reserved_on(names[0])) == 1, timeout=60), logs()
        [lost] = reserved_on(names[0])
        # Its record expires while it is frozen (15 s: deleted here instead); it is killed.
        env.redis.delete(worker_key(names[0]))
        os.kill(frozen.pid, signal.SIGKILL)

        def all_done() -> bool:
            return {env.job(j).state for j in jobs} == {"succeeded"}

        assert wait_until(all_done, timeout=60), logs()
    finally:
        dispatcher.stop()
        stop(frozen)
        stop(left)
    runs = {j: (env.job(j).attempt, env.job(j).worker) for j in jobs}
    assert runs == {j: (2 if j == lost else 1, names[1]) for j in jobs}
