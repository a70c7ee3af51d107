"""The app in-process (FastAPI's TestClient) over a real database and a real Redis.

`database_url` here is a migrated database of the test's own, made cheaply: on SQLite a copy
of a file migrated once per test process, on PostgreSQL the module's migrated database put back
as the migrations left it before the test (`MigratedPostgres`; creating, migrating and dropping
one per test cost about a second). A test that changes the schema itself asks for a fresh
one (`sqlite_url`, `postgres_url`)."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
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
def postgres_template(postgres_server_url: str) -> Iterator[str]:
    """The name of a database migrated once per test process, which nobody connects to after:
    the template of each test's PostgreSQL database, so that no test migrates one again."""
    with postgres_database(postgres_server_url) as url:
        upgrade_database(url)
        name = make_url(url).database
        assert name is not None
        yield name


@pytest.fixture
def postgres_url(postgres_server_url: str, postgres_template: str) -> Iterator[str]:
    """A database of the test's own, migrated: a copy of `postgres_template`."""
    with postgres_database(postgres_server_url, template=postgres_template) as url:
        yield url


@pytest.fixture(scope="session")
def migrated_sqlite_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the head revision, copied by each test that wants one."""
    path = tmp_path_factory.mktemp("migrated-sqlite") / "launchbay.db"
    upgrade_database(f"sqlite:///{path}")
    return path


class MigratedPostgres:
    """A PostgreSQL database migrated to the head revision, shared by a module's tests, and
    put back as the migrations left it before each: every row deleted (children first; ten
    times quicker than TRUNCATE on tables this small), the sequences restarted, and the rows
    the migrations seed (`write_check`, `dispatcher_lease`) written again. A lock still held by
    a test before (a connection left open) fails the reset after 10 s instead of hanging it."""

    def __init__(self, url: str) -> None:
        self.url = url
        upgrade_database(url)
        engine = make_engine(url)
        try:
            with engine.connect() as connection:
                metadata = sa.MetaData()
                metadata.reflect(connection)
                self.tables = [t for t in metadata.sorted_tables if t.name != "alembic_version"]
                self.seeded = {
                    t.name: [dict(row._mapping) for row in connection.execute(sa.select(t))]
                    for t in self.tables
                }
                self.sequences = (
                    connection.execute(
                        sa.text("SELECT sequence_name FROM information_schema.sequences")
                    )
                    .scalars()
                    .all()
                )
        finally:
            engine.dispose()

    def reset(self) -> None:
        engine = make_engine(self.url)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text("SET LOCAL lock_timeout = '10s'"))
                for table in reversed(self.tables):
                    connection.execute(sa.delete(table))
                for sequence in self.sequences:
                    connection.execute(sa.text(f'ALTER SEQUENCE "{sequence}" RESTART'))
                for table in self.tables:
                    if self.seeded[table.name]:
                        connection.execute(sa.insert(table), self.seeded[table.name])
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
def migrated_postgres(postgres_server_url: str) -> Iterator[MigratedPostgres]:
    with postgres_database(postgres_server_url) as url:
        yield MigratedPostgres(url)


def copy_migrated_sqlite(migrated: Path, url: str) -> str:
    """Puts a copy of the migrated file where the SQLite `url` points; returns `url`."""
    path = Path(make_url(url).database or "")
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated, path)
    return url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """A migrated, empty database of the test's own, on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        migrated: Path = request.getfixturevalue("migrated_sqlite_file")
        return copy_migrated_sqlite(migrated, request.getfixturevalue("sqlite_url"))
    database: MigratedPostgres = request.getfixturevalue("migrated_postgres")
    database.reset()
    return database.url


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
