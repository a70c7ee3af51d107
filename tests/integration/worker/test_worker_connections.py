"""An idle worker holds no PostgreSQL connection, so a hundred workers and the API's pool fit
under PostgreSQL's default `max_connections` (100)."""

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text

from service.db import make_engine, upgrade_database

# Worker contexts between jobs (one per worker process): each took an attempt (a session on
# its engine), as `worker.rq_worker` does for each job; beside them, an engine made as the API
# makes its own, for comparison. Then they wait.
IDLE_WORKERS = """
import sys
from service import records
from service.db import make_engine, session_scope
from service.settings import Settings
from worker.context import WorkerContext
url, count = sys.argv[1], int(sys.argv[2])
contexts = [
    WorkerContext(configured=Settings(database_url=url + "?application_name=lb-worker"))
    for _ in range(count)
]
engines = [context.engine() for context in contexts]
engines.append(make_engine(url + "?application_name=lb-pooled"))
for engine in engines:
    with session_scope(engine) as session:
        records.read_job_state(session, "no-such-job", 1)
print("idle", flush=True)
sys.stdin.read()
"""


@contextmanager
def idle_workers(url: str, count: int) -> Iterator[None]:
    proc = subprocess.Popen(
        [sys.executable, "-c", IDLE_WORKERS, url, str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "idle"
        yield
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # it reads to the end, then exits
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def connections(url: str) -> dict[str, int]:
    """Connections to the test's database other than the one asking, by application name."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            query = (
                "SELECT application_name, count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "GROUP BY application_name"
            )
            return {name: int(n) for name, n in connection.execute(text(query)).all()}
    finally:
        engine.dispose()


def test_idle_workers_hold_no_connection_and_fit_beside_the_api(postgres_url: str) -> None:
    upgrade_database(postgres_url)
    assert connections(postgres_url) == {}
    with idle_workers(postgres_url, 5):
        # What a worker held before: a pooled engine keeps its connection after a session.
        assert connections(postgres_url) == {"lb-pooled": 1}
    # The API's pool at its largest, beside any number of idle workers and the superuser's
    # reserved connections (3 by default), fits under the default max_connections.
    api_engine = make_engine(postgres_url)
    pool = api_engine.pool
    most = pool.size() + pool._max_overflow  # type: ignore[attr-defined]
    api_engine.dispose()
    assert most + 3 <= 100
