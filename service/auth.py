"""Bearer tokens: who a request comes from.

A token is `lb_` and 43 URL-safe characters (32 random bytes). Only its sha256 is stored
(a fast hash is enough for 256 random bits), looked up by that hash and compared with
`hmac.compare_digest`. `LAUNCHBAY_ADMIN_TOKEN`, when set, is one more admin token, named
`admin`, that lives only in the environment. There is no anonymous access: without either,
only the health, readiness and documentation routes answer.

Every token has an owner name, which is also the owner of the jobs and uploads made with
it. A revoked or expired token keeps its row, so its name is never handed to a new token.

A verified token is remembered for `TOKEN_CACHE_TTL_S` (2 s) by the process that checked it,
so most requests need no database read to authenticate. Revoking through a process forgets
the token there at once; another API process, or a row changed in the database directly,
may still accept it for at most those 2 s. A token's own expiry is checked on every request.
"""

import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
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
# How long a verified token is trusted without reading its row again (see the docstring).
TOKEN_CACHE_TTL_S = 2.0
TOKEN_CACHE_MAX_ENTRIES = 4096

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


@lru_cache(maxsize=4)
def _admin_digest(admin_token: str) -> str:
    return hash_token(admin_token)


class TokenCache:
    """Principals of recently verified tokens, by token hash, each for `ttl_s` seconds."""

    def __init__(self, ttl_s: float, max_entries: int) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        # digest -> (principal, trusted until (monotonic), the token's expiry (Unix s) or inf)
        self._entries: dict[str, tuple[Principal, float, float]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str) -> Principal | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        principal, trusted_until, expires_at = entry
        if trusted_until <= time.monotonic() or expires_at <= time.time():
            return None
        return principal

    def put(self, digest: str, principal: Principal, expires_at: datetime | None) -> None:
        expiry = float("inf") if expires_at is None else _unix_seconds(expires_at)
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.pop(next(iter(self._entries)))  # the oldest entry
            self._entries[digest] = (principal, time.monotonic() + self.ttl_s, expiry)

    def forget(self, name: str) -> None:
        with self._lock:
            for digest in [d for d, e in self._entries.items() if e[0].name == name]:
                del self._entries[digest]


def _unix_seconds(moment: datetime) -> float:
    # SQLite hands back naive datetimes; they were written in UTC.
    return (moment if moment.tzinfo else moment.replace(tzinfo=utcnow().tzinfo)).timestamp()


# One per process: revoking through the API forgets the token here at once.
verified_tokens = TokenCache(TOKEN_CACHE_TTL_S, TOKEN_CACHE_MAX_ENTRIES)


def _usable(token: str) -> bool:
    return bool(token) and len(token) <= MAX_TOKEN_CHARS


def known_principal(admin_token: str | None, token: str) -> Principal | None:
    """The principal of the admin token or of a token verified in the last
    `TOKEN_CACHE_TTL_S` seconds, without the database; None when that is not known."""
    if not _usable(token):
        return None
    digest = hash_token(token)
    if admin_token and hmac.compare_digest(digest, _admin_digest(admin_token)):
        return Principal(name=ADMIN_NAME, role="admin")
    return verified_tokens.get(digest)


def authenticate(session: Session, admin_token: str | None, token: str) -> Principal:
    """The principal `token` stands for; 401 when it is unknown, revoked or expired.

    The messages never repeat the token.
    """
    if not _usable(token):
        raise Unauthorized("invalid token", headers=CHALLENGE)
    digest = hash_token(token)
    if admin_token and hmac.compare_digest(digest, _admin_digest(admin_token)):
        return Principal(name=ADMIN_NAME, role="admin")
    row = session.exec(select(ApiToken).where(ApiToken.token_hash == digest)).first()
    if row is None or not hmac.compare_digest(row.token_hash, digest):
        raise Unauthorized("invalid token", headers=CHALLENGE)
    if row.revoked_at is not None:
        raise Unauthorized("the token was revoked", headers=CHALLENGE)
    if row.expires_at is not None and _unix_seconds(row.expires_at) <= time.time():
        raise Unauthorized("the token has expired", headers=CHALLENGE)
    principal = Principal(name=row.name, role=row.role)
    verified_tokens.put(digest, principal, row.expires_at)
    return principal


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
    verified_tokens.forget(name)
