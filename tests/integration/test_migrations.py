"""The migrations build exactly the tables the models describe (SQLite and PostgreSQL)."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import service.models  # noqa: F401  (registers the tables)
from service.db import make_engine
from service.settings import Settings


def test_the_migrated_schema_matches_the_models(settings: Settings) -> None:
    engine = make_engine(settings.resolved_database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, SQLModel.metadata)
    finally:
        engine.dispose()
    assert differences == []
