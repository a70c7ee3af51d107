"""Bearer tokens: who a request comes from.

A token is `lb_` and 43 URL-safe characters (32 random bytes). Only its sha256 is stored
(a fast hash is enough for 256 random bits), looked up by that hash and compared with
`hmac.compare_digest`. `LAUNCHBAY_ADMIN_TOKEN`, when set, is one more admin token, named
`admin`, that lives only in the environment. There is no anonymous access: without either,
only the health, readiness and documentation routes answer.

Every token has an owner name, which is also the owner of the jobs and uploads made with
it. A revoked or expired token keeps its row, so its name is never handed to a new token.
"""

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from service.errors import Conflict, NotFound, Unauthorized
from service.models import ApiToken, utcnow

TOKEN_PREFIX = "lb_"
TOKEN_BYTES = 32
# Owner names: path-safe, and no longer than `Job.owner`.
TOKEN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$"
_TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}")
ADMIN_NAME = "admin"
# Longer than any token we issue (or a sane admin token); refused before hashing.
MAX_TOKEN_CHARS = 1024
CHALLENGE = {"WWW-Authenticate": "Bearer"}

Role = Literal["user", "admin"]


@dataclass(frozen=True)
class Principal:
    """Who is calling: an owner name and a role."""

    name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def valid_name(name: str) -> bool:
    return _TOKEN_NAME.fullmatch(name) is not None


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).hexdigest()


def authenticate(session: Session, admin_token: str | None, token: str) -> Principal:
    """The principal `token` stands for; 401 when it is unknown, revoked or expired.

    The messages never repeat the token.
    """
    if not token or len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("invalid token", headers=CHALLENGE)
    digest = hash_token(token)
    if admin_token and hmac.compare_digest(digest, hash_token(admin_token)):
        return Principal(name=ADMIN_NAME, role="admin")
    row = session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).first()
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        raise Unauthorized("invalid token", headers=CHALLENGE)
    if row.revoked_at is not None:
        raise Unauthorized("the token was revoked", headers=CHALLENGE)
    if row.expires_at is not None and row.expires_at <= utcnow():
        raise Unauthorized("the token has expired", headers=CHALLENGE)
    return Principal(name=row.name, role=row.role)


def create_token(
    session: Session, name: str, role: Role, expires_at: datetime | None
) -> tuple[ApiToken, str]:
    """A new token for `name` and its secret (returned this once); 409 if the name is taken."""
    if name == ADMIN_NAME:
        raise Conflict(
            f"the name {ADMIN_NAME!r} belongs to LAUNCHBAY_ADMIN_TOKEN",
            code="reserved_name",
            detail={"name": name},
        )
    existing = session.get(ApiToken, name)
    if existing is not None:
        raise _name_taken(existing)
    secret = new_token()
    row = ApiToken(name=name, role=role, token_hash=hash_token(secret), expires_at=expires_at)
    session.add(row)
    try:
        session.commit()
    except IntegrityError:
        # Another request took the name first.
        session.rollback()
        taken = session.get(ApiToken, name)
        if taken is None:
            raise
        raise _name_taken(taken) from None
    return row, secret


def _name_taken(row: ApiToken) -> Conflict:
    revoked = row.revoked_at is not None
    why = "a revoked token" if revoked else "another token"
    return Conflict(
        f"the name {row.name!r} is taken by {why}; names are never reused, pick another",
        code="token_name_taken",
        detail={"name": row.name, "revoked": revoked},
    )


def list_tokens(session: Session) -> list[ApiToken]:
    return list(session.exec(select(ApiToken).order_by(col(ApiToken.name))).all())


def revoke_token(session: Session, name: str) -> None:
    """Revoke the token `name` (again: no change); 404 if there is none."""
    if name == ADMIN_NAME:
        raise Conflict(
            "LAUNCHBAY_ADMIN_TOKEN cannot be revoked over the API; unset it and restart the API",
            code="reserved_name",
            detail={"name": name},
        )
    if session.get(ApiToken, name) is None:
        raise NotFound(f"no token named {name!r}", detail={"name": name})
    session.execute(
        update(ApiToken)
        .where(col(ApiToken.name) == name, col(ApiToken.revoked_at).is_(None))
        .values(revoked_at=utcnow())
    )
    session.commit()
