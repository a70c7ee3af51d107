"""Everything routes inject, as typed `Annotated` aliases."""

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.auth import CHALLENGE, Principal, authenticate
from service.errors import Forbidden, NotFound, Unauthorized
from service.models import Job
from service.settings import Settings


def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> Iterator[Session]:
    with Session(engine, expire_on_commit=False) as session:
        yield session


def get_redis(request: Request) -> Redis:
    redis: Redis = request.app.state.redis
    return redis


# The largest seq (a BIGINT): a larger `after` cannot match and the databases refuse it.
MAX_SEQ = 2**63 - 1

SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
RedisDep = Annotated[Redis, Depends(get_redis)]

bearer = HTTPBearer(
    auto_error=False,
    description="`Authorization: Bearer <token>`: a token from POST /v1/tokens, "
    "or LAUNCHBAY_ADMIN_TOKEN.",
)


def get_principal(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    session: SessionDep,
    settings: SettingsDep,
) -> Principal:
    """The caller, from its bearer token; 401 without a valid one. There is no open mode."""
    if credentials is None:
        raise Unauthorized("missing bearer token", headers=CHALLENGE)
    return authenticate(session, settings.admin_token, credentials.credentials)


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def require_admin(principal: CurrentPrincipal) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this needs a token with the admin role")
    return principal


AdminPrincipal = Annotated[Principal, Depends(require_admin)]


def get_owned_job(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> Job:
    """The job, if the caller may see it; others' jobs are 'not found' so ids do not leak."""
    # Longer than any id, or a NUL (which PostgreSQL refuses in a query): no such job.
    job = None if len(job_id) > 32 or "\x00" in job_id else session.get(Job, job_id)
    if job is None or not (principal.is_admin or job.owner == principal.name):
        raise NotFound(f"no job {job_id!r}", detail={"job_id": job_id})
    return job


OwnedJob = Annotated[Job, Depends(get_owned_job)]
