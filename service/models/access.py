"""Who may do what, and what they did: API tokens, code uploads, the audit log."""

from datetime import datetime

from sqlalchemy import BigInteger, Column, Text
from sqlmodel import Field, SQLModel

from service.models.columns import BigIntPK, utcnow


class ApiToken(SQLModel, table=True):
    """A bearer token. `name` is its owner's name: the jobs and uploads the token makes carry it.

    Only the sha256 of the secret is kept. A revoked token keeps its row (`revoked_at`), so its
    name, and with it the jobs of that name, never passes silently to a new token.
    """

    __tablename__ = "api_token"

    name: str = Field(primary_key=True, max_length=128)
    role: str = Field(max_length=16)
    token_hash: str = Field(max_length=64, unique=True, index=True)
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


class CodeUpload(SQLModel, table=True):
    """Who uploaded which code. The files live once per `code_id` (the sha256 of the upload)
    under `<data dir>/code/<code_id>/`; each owner who uploaded them has a row."""

    __tablename__ = "code_upload"

    code_id: str = Field(primary_key=True, max_length=64)
    owner: str = Field(primary_key=True, max_length=128)
    filename: str = Field(max_length=255)
    size: int = Field(sa_type=BigInteger)
    created_at: datetime = Field(default_factory=utcnow)
    # What it unpacked to, counted against the owner's quota (0 for uploads before 0006).
    unpacked_size: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default="0")
    )


class AuditRecord(SQLModel, table=True):
    """One state-changing request, answered or refused: who, when, from where, what, outcome."""

    __tablename__ = "audit_record"

    id: int | None = Field(default=None, primary_key=True, sa_type=BigIntPK)
    ts: datetime = Field(default_factory=utcnow, index=True)
    # The caller's name; None when it was not authenticated.
    owner: str | None = Field(default=None, max_length=128, index=True)
    kind: str = Field(max_length=64, index=True)
    method: str = Field(max_length=8)
    path: str = Field(sa_column=Column(Text, nullable=False))
    target: str | None = Field(default=None, max_length=256)
    client: str | None = Field(default=None, max_length=64)
    status: int
    outcome: str = Field(max_length=16)
