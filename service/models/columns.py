"""Column types and helpers that the tables share."""

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import WithJsonSchema
from sqlalchemy import BigInteger, Dialect, Integer
from sqlalchemy.types import TypeDecorator
from sqlmodel import AutoString

# SQLite only autoincrements an INTEGER PRIMARY KEY; PostgreSQL gets 64 bits.
BigIntPK = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class StrEnumColumn(TypeDecorator[StrEnum]):
    """A string column whose values are read back as members of `enum` (stored as plain
    strings, so the schema does not change)."""

    impl = AutoString
    cache_ok = True

    def __init__(self, enum: type[StrEnum], length: int) -> None:
        super().__init__(length=length)
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else str(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> StrEnum | None:
        return None if value is None else self.enum(value)


def inline_enum(enum: type[StrEnum]) -> WithJsonSchema:
    """A string enum's JSON schema written where it is used (`type` and `enum`), not as a
    reference: clients that read a field's type from the schema see a string."""
    return WithJsonSchema({"type": "string", "enum": [m.value for m in enum]})
