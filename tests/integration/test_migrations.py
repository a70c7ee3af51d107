"""The migrations build exactly the tables the models describe (SQLite and PostgreSQL)."""

from typing import Any

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
