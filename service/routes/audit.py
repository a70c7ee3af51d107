"""The audit log (admin only): who did what, when, from where, with what outcome."""

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel
from sqlmodel import col, func, select

from service.deps import AdminPrincipal, SessionDep
from service.models import AuditRecord


class AuditRecordPublic(BaseModel):
    id: int
    ts: datetime
    owner: str | None
    kind: str
    method: str
    path: str
    target: str | None
    client: str | None
    status: int
    outcome: str

    @classmethod
    def from_row(cls, row: AuditRecord) -> "AuditRecordPublic":
        ts = row.ts if row.ts.tzinfo else row.ts.replace(tzinfo=UTC)
        return cls(**{**row.model_dump(), "ts": ts})


class AuditRecordsPublic(BaseModel):
    items: list[AuditRecordPublic]
    total: int


router = APIRouter(prefix="/v1/audit", tags=["audit"])


@router.get("", response_model=AuditRecordsPublic)
def list_audit_records(
    session: SessionDep,
    _admin: AdminPrincipal,
    owner: Annotated[str | None, Query(max_length=128)] = None,
    kind: Annotated[str | None, Query(max_length=64)] = None,
    outcome: Annotated[str | None, Query(pattern="^(ok|refused|error)$")] = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> AuditRecordsPublic:
    """Newest first. `kind` is a kind (`job.submit`) or a prefix ending in a dot (`job.`);
    `since` and `until` are ISO 8601 times (UTC when they name no zone) or Unix seconds."""
    stmt = select(AuditRecord)
    if owner is not None:
        stmt = stmt.where(AuditRecord.owner == owner)
    if kind is not None:
        if kind.endswith("."):
            stmt = stmt.where(func.substr(col(AuditRecord.kind), 1, len(kind)) == kind)
        else:
            stmt = stmt.where(AuditRecord.kind == kind)
    if outcome is not None:
        stmt = stmt.where(AuditRecord.outcome == outcome)
    if since is not None:
        stmt = stmt.where(col(AuditRecord.ts) >= _as_utc(since))
    if until is not None:
        stmt = stmt.where(col(AuditRecord.ts) < _as_utc(until))
    total = session.exec(select(func.count()).select_from(stmt.subquery())).one()
    rows = session.exec(stmt.order_by(col(AuditRecord.id).desc()).offset(offset).limit(limit)).all()
    return AuditRecordsPublic(items=[AuditRecordPublic.from_row(r) for r in rows], total=total)


def _as_utc(moment: datetime) -> datetime:
    """A naive time is UTC; the stored times are UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
