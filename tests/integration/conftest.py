"""The app in-process (FastAPI's TestClient) over a real database and a real Redis."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine, make_url
from sqlmodel import Session, func, select

from service.app import create_app
from service.db import make_engine, upgrade_database
from service.models import Job
from service.settings import Settings
from tests.support.services import postgres_database

ADMIN_TOKEN = "lb_integration-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server_url: str) -> Iterator[str]:
    """The name of a database migrated once per test process, which nobody connects to after:
    the template of each test's PostgreSQL database, so that no test migrates one again."""
    with postgres_database(postgres_server_url) as url:
        upgrade_database(url)
        name = make_url(url).database
        assert name is not None
        yield name


@pytest.fixture
def postgres_url(postgres_server_url: str, migrated_postgres: str) -> Iterator[str]:
    """A database of the test's own, migrated: a copy of `migrated_postgres`."""
    with postgres_database(postgres_server_url, template=migrated_postgres) as url:
        yield url


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_url: str) -> Settings:
    upgrade_database(database_url)
    return Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        redis_url=redis_url,
        admin_token=ADMIN_TOKEN,
    )


@pytest.fixture
def api(settings: Settings) -> Iterator[TestClient]:
    """The app, called as the admin (`LAUNCHBAY_ADMIN_TOKEN`) unless a request says otherwise."""
    with TestClient(create_app(settings), raise_server_exceptions=False, headers=ADMIN) as client:
        yield client


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """An engine on the test's database (migrated), disposed of afterwards."""
    engine = make_engine(settings.resolved_database_url)
    try:
        yield engine
    finally:
        engine.dispose()


def count_jobs(settings: Settings) -> int:
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            return int(session.exec(select(func.count()).select_from(Job)).one())
    finally:
        engine.dispose()
