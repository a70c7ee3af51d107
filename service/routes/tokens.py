"""API tokens (admin only): create (the secret is shown once), list, revoke."""

import logging
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Field, field_validator

from service import auth
from service.deps import AdminPrincipal, SessionDep
from service.errors import NotFound
from service.models import ApiToken, utcnow

log = logging.getLogger("launchbay.api")
router = APIRouter(prefix="/v1/tokens", tags=["tokens"])


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=auth.TOKEN_NAME_PATTERN)]
    role: auth.Role = "user"
    expires_at: datetime | None = None

    @field_validator("expires_at")
    @classmethod
    def _future_utc(cls, value: datetime | None) -> datetime | None:
        """A time without a zone is UTC; it must lie ahead."""
        if value is None:
            return None
        try:
            value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        except OverflowError:
            raise ValueError("expires_at is out of range") from None
        if value <= utcnow():
            raise ValueError("expires_at is in the past")
        return value


class TokenCreated(BaseModel):
    name: str
    role: str
    token: str


class TokenPublic(BaseModel):
    name: str
    role: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    active: bool

    @classmethod
    def from_row(cls, row: ApiToken, now: datetime) -> "TokenPublic":
        expired = row.expires_at is not None and row.expires_at <= now
        return cls(
            name=row.name,
            role=row.role,
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            active=row.revoked_at is None and not expired,
        )


class TokensPublic(BaseModel):
    items: list[TokenPublic]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=TokenCreated)
def create_token(body: TokenCreate, session: SessionDep, admin: AdminPrincipal) -> TokenCreated:
    row, secret = auth.create_token(session, body.name, body.role, body.expires_at)
    log.info("token %s (%s) created by %s", row.name, row.role, admin.name)
    return TokenCreated(name=row.name, role=row.role, token=secret)


@router.get("", response_model=TokensPublic)
def list_tokens(session: SessionDep, _admin: AdminPrincipal) -> TokensPublic:
    now = utcnow()
    return TokensPublic(items=[TokenPublic.from_row(r, now) for r in auth.list_tokens(session)])


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_token(name: str, session: SessionDep, admin: AdminPrincipal) -> Response:
    if name != auth.ADMIN_NAME and not auth.valid_name(name):
        raise NotFound(f"no token named {name!r}", detail={"name": name})
    auth.revoke_token(session, name)
    log.info("token %s revoked by %s", name, admin.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
