"""The service's own look at its database."""

from datetime import datetime

from sqlalchemy import BigInteger
from sqlmodel import Field, SQLModel


class WriteCheck(SQLModel, table=True):
    """The one row the readiness check and the reaper write to learn whether the database
    takes writes (`service.readiness`): a read says nothing of a SQLite that is locked, full
    or read-only, nor of a PostgreSQL standby."""

    __tablename__ = "write_check"

    id: int = Field(primary_key=True)
    written_at: datetime
    writes: int = Field(sa_type=BigInteger)
