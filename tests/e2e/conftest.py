"""A running stack per test: `launchbay api` and one `launchbay worker`, real torchrun."""

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import make_stack
from tests.support.stack import Stack


@pytest.fixture
def stack(tmp_path: Path, database_url: str, redis_url: str) -> Iterator[Stack]:
    """The API and one worker on the database under test (SQLite and PostgreSQL)."""
    running = make_stack(tmp_path / "stack", database_url, redis_url)
    try:
        running.start_api()
        running.start_worker()
        yield running
    finally:
        running.stop()


@pytest.fixture
def sqlite_stack(tmp_path: Path, sqlite_url: str, redis_url: str) -> Iterator[Stack]:
    """The same on SQLite only, for tests whose point is not the database."""
    running = make_stack(tmp_path / "stack", sqlite_url, redis_url)
    try:
        running.start_api()
        running.start_worker()
        yield running
    finally:
        running.stop()


def job_processes(job_id: str) -> list[psutil.Process]:
    """Live processes started for a job (every rank carries LAUNCHBAY_JOB_ID)."""
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get("LAUNCHBAY_JOB_ID") == job_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found
