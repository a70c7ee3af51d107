"""A running stack per test: `launchbay api` and one `launchbay worker`, real torchrun."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.support.stack import Stack


def _running(root: Path, database_url: str, redis_url: str) -> Iterator[Stack]:
    stack = make_stack(root, database_url, redis_url)
    try:
        stack.start_api()
        stack.start_worker()
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
