"""The migrations build exactly the tables the models describe (SQLite and PostgreSQL)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy.engine import make_url
from sqlmodel import Session, SQLModel, col, select

import service.models  # noqa: F401  (registers the tables)
from jobs.spec import JobSpec
from service import records
from service.db import MIGRATIONS_DIR, make_engine
from service.models import Job, MetricPoint, MetricRollup
from service.settings import Settings
from tests.support.services import postgres_database


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """An empty database (not tests/integration/conftest.py's migrated copy): these tests run
    the migrations themselves."""
    with postgres_database(postgres_server_url) as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh, unmigrated database: these tests migrate it themselves, down as well as up."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


def test_the_migrated_schema_matches_the_models(settings: Settings) -> None:
    engine = make_engine(settings.resolved_database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, SQLModel.metadata)
            dialect = connection.dialect.name
    finally:
        engine.dispose()
    assert [d for d in differences if not _other_dialects_index(d, dialect)] == []


def _other_dialects_index(difference: Any, dialect: str) -> bool:
    """An index the models build only on another database (`Index.ddl_if(dialect=...)`, such
    as PostgreSQL's trigram index on log lines)."""
    if not isinstance(difference, tuple) or difference[0] != "add_index":
        return False
    name = difference[1].name
    for table in SQLModel.metadata.tables.values():
        for index in table.indexes:
            only_on = getattr(index, "_ddl_if", None)
            if index.name == name and only_on is not None:
                return only_on.dialect not in (None, dialect)
    return False


def migrate(url: str, revision: str, *, down: bool = False) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    (command.downgrade if down else command.upgrade)(config, revision)


OLD_ROLLUP = sa.table(
    "metric_rollup",
    *(sa.column(c) for c in ("job_id", "width", "name", "bucket")),
    *(sa.column(c) for c in ("min_value", "min_seq", "max_value", "max_seq")),
)


def test_rollups_stored_before_0014_get_their_extremes_from_the_points(database_url: str) -> None:
    """A database with points and rollups at 0013 (rollups without the extremes' step,
    epoch, ts and attempt) is upgraded: each rollup row gets them from its points, a row whose
    points are gone is dropped, and the chart then reads the same points as the raw rows."""
    if database_url.startswith("sqlite"):
        Path(make_url(database_url).database or "").parent.mkdir(parents=True, exist_ok=True)
    # The job is made by today's model, then the schema goes back to 0013 under it.
    migrate(database_url, "head")
    engine = make_engine(database_url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            job = records.create_job(session, JobSpec(name="old", recipe="synthetic"))
        engine.dispose()
        migrate(database_url, "0013", down=True)
        with Session(engine, expire_on_commit=False) as session:
            points = [
                {"job_id": job.id, "seq": seq, "attempt": 1 + seq // 300, "name": "loss"}
                | {"step": seq * 10, "epoch": None if seq % 2 else seq // 100}
                | {"value": ((seq * 37) % 101) / 7.0, "ts": 1000.0 + seq / 3}
                for seq in range(1, 640)
            ]
            session.execute(sa.insert(MetricPoint), points)
            rollups = []
            for bucket in range(11):  # 10 of 64 seqs, and an eleventh whose points are gone
                own = [p for p in points if p["seq"] // 64 == bucket] or [
                    {"seq": 10_000, "value": 1.0}
                ]
                low = min(own, key=lambda p: (p["value"], p["seq"]))
                high = max(own, key=lambda p: (p["value"], -p["seq"]))
                rollups.append(
                    {"job_id": job.id, "width": 64, "name": "loss", "bucket": bucket}
                    | {"min_value": low["value"], "min_seq": low["seq"]}
                    | {"max_value": high["value"], "max_seq": high["seq"]}
                )
            session.execute(sa.insert(OLD_ROLLUP), rollups)
            session.execute(sa.update(Job).where(col(Job.id) == job.id).values(last_seq=639))
            session.commit()
        migrate(database_url, "head")
        by_seq = {p["seq"]: p for p in points}
        with Session(engine) as session:
            rows = session.exec(select(MetricRollup).where(MetricRollup.job_id == job.id)).all()
            assert sorted(r.bucket for r in rows) == list(range(10))
            for row in rows:
                for end in ("min", "max"):
                    raw = by_seq[getattr(row, f"{end}_seq")]
                    got = {f: getattr(row, f"{end}_{f}") for f in ("step", "epoch", "ts")}
                    assert got == {f: raw[f] for f in ("step", "epoch", "ts")}
                    assert getattr(row, f"{end}_attempt") == raw["attempt"]
                    assert getattr(row, f"{end}_value") == raw["value"]
            chart = records.downsample(session, job.id, "loss", last_seq=639, max_points=20)
            assert 2 < len(chart) <= 20
            for point in chart:
                raw = by_seq[point.seq]
                assert tuple(point) == tuple(
                    raw[c] for c in ("seq", "step", "epoch", "name", "value", "ts", "attempt")
                )
            assert {p.seq for p in chart} >= {
                min(points, key=lambda p: (p["value"], p["seq"]))["seq"],
                max(points, key=lambda p: (p["value"], -p["seq"]))["seq"],
            }
        # And back to 0013's table, its rows kept.
        migrate(database_url, "0013", down=True)
        with engine.connect() as connection:
            left = connection.execute(sa.select(sa.func.count()).select_from(OLD_ROLLUP)).one()
        assert left[0] == 10
    finally:
        engine.dispose()
