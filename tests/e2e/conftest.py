"""Running stacks, `launchbay api` and one `launchbay worker`, real torchrun: one per test
(`stack`, `sqlite_stack`), or one a module's tests share (`shared_sqlite_stack`,
`shared_postgres_stack`: each test submits jobs of its own and leaves the stack as it found
it; a test that restarts, kills or adds to a stack's parts takes one of its own)."""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.support.services import postgres_database, private_redis
from tests.support.stack import Stack


def _running(root: Path, database_url: str, redis_url: str) -> Iterator[Stack]:
    stack = make_stack(root, database_url, redis_url)
    try:
        stack.start_api(wait=False)  # the worker starts meanwhile
        stack.start_worker()
        stack.wait_for_api()
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def stack(tmp_path: Path, database_url: str, redis_url: str) -> Iterator[Stack]:
    """The API and one worker on the database under test (SQLite and PostgreSQL)."""
    yield from _running(tmp_path / "stack", database_url, redis_url)


@pytest.fixture
def sqlite_stack(tmp_path: Path, sqlite_url: str, redis_url: str) -> Iterator[Stack]:
    """The same on SQLite only, for tests whose point is not the database."""
    yield from _running(tmp_path / "stack", sqlite_url, redis_url)


@pytest.fixture(scope="module")
def shared_sqlite_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API and one worker on SQLite, with a Redis of their own, for the module."""
    with stack_of_its_own(tmp_path_factory.mktemp("shared-sqlite")) as running:
        yield running


@pytest.fixture(scope="module")
def shared_postgres_stack(
    tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str
) -> Iterator[Stack]:
    """The API and one worker on a PostgreSQL database of their own, for the module."""
    root = tmp_path_factory.mktemp("shared-postgres")
    with (
        postgres_database(postgres_server_url) as url,
        stack_of_its_own(root, database_url=url) as running,
    ):
        yield running


@contextmanager
def stack_of_its_own(
    root: Path,
    workers: Sequence[Sequence[str]] = ((),),
    database_url: str | None = None,
    **env: str,
) -> Iterator[Stack]:
    """A stack with a Redis of its own (and SQLite under `root`, unless `database_url`), with
    settings `env` and one worker per entry of `workers` (the queues it serves; none:
    `default`), for tests that restart, kill or freeze its parts."""
    with private_redis() as redis:
        url = database_url or f"sqlite:///{root / 'launchbay.db'}"
        running = make_stack(root / "stack", url, redis.url(), **env)
        try:
            running.start_api(wait=False)  # the workers start meanwhile
            for queues in workers:
                running.start_worker(*queues)
            running.wait_for_api()
            yield running
        finally:
            running.stop()
