"""Session-wide services and the check that no test leaves a process behind."""

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.services import PostgresCluster, private_postgres
from tests.support.isolation import (
    HostSnapshot,
    reachable_by_job_users,
    remove_reachable_dirs,
    remove_session_pool,
    session_pool,
)
from tests.support.outages import DatabaseOutage
from tests.support.procs import SESSION_MARKER, marked_processes
from tests.support.services import (
    RedisServer,
    S3Server,
    postgres_database,
    postgres_server,
    private_redis,
    private_s3,
)
from tests.support.stack import Stack

MARKER = uuid.uuid4().hex
os.environ[SESSION_MARKER] = MARKER
# Workers running in this process pass the marker on to their jobs' ranks (stacks do it too).
os.environ["LAUNCHBAY_JOB_PASS_ENV"] = SESSION_MARKER
# Job users of this session's own, removed at its end; the host as it was before, to compare.
POOL_PREFIX = session_pool()
HOST_BEFORE = HostSnapshot.take(POOL_PREFIX)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with private_redis() as server:
        yield server


_redis_dbs = iter(range(1, 16))


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """A Redis database of its own, so stacks never take each other's jobs."""
    import redis

    url = redis_server.url(next(_redis_dbs, 0))
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """An S3 protocol server (moto's) for the session; each test keeps to a prefix of its own
    (`s3_prefix`), so nothing one test stores is seen by another."""
    with private_s3() as server:
        yield server


@pytest.fixture
def s3_prefix(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix in the session's bucket, with the AWS_* credentials set for the test."""
    for name, value in s3_server.env().items():
        if name.startswith("AWS_"):
            monkeypatch.setenv(name, value)
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def postgres_server_url() -> Iterator[str]:
    with postgres_server() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    with postgres_database(postgres_server_url) as url:
        yield url


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """A private PostgreSQL cluster that the outage tests stop and start."""
    with private_postgres() as cluster:
        yield cluster


@pytest.fixture(params=["sqlite", "postgres"])
def database_outage(request: pytest.FixtureRequest) -> Iterator[DatabaseOutage]:
    """A database of the test's own that it may take away (`DatabaseOutage`): SQLite, and
    PostgreSQL on the private cluster."""
    if request.param == "sqlite":
        outage = DatabaseOutage(request.getfixturevalue("sqlite_url"))
        try:
            yield outage
        finally:
            outage.end()
        return
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    with postgres_database(cluster.url()) as url:
        outage = DatabaseOutage(url, cluster)
        try:
            yield outage
        finally:
            outage.end()  # running again for the next test and the DROP, whatever this one did


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'launchbay.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


def make_stack(root: Path, database_url: str, redis_url: str, **env: str) -> Stack:
    root = reachable_by_job_users(root)
    return Stack(
        root=root, database_url=database_url, redis_url=redis_url, marker=MARKER, extra_env=env
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    leftovers = marked_processes(MARKER)
    described = [f"{p.pid} {' '.join(p.cmdline())[:160]}" for p in leftovers]
    for proc in leftovers:
        proc.kill()
    complaints = [("processes left behind by the tests (killed now):", described)]
    try:
        remove_session_pool()
        changed = HOST_BEFORE.changes(HostSnapshot.take(POOL_PREFIX))
    except Exception as exc:  # noqa: BLE001 - the session fails, saying why
        changed = [f"the session's job users could not be removed: {exc}"]
    remove_reachable_dirs()
    complaints.append(("the tests changed the host outside their temporary directories:", changed))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for title, lines in complaints:
        if not lines:
            continue
        if reporter is not None:
            reporter.write_line(title, red=True)
            for line in lines:
                reporter.write_line(f"  {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
