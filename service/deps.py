"""Everything routes inject, as typed `Annotated` aliases."""

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from redis import Redis
from sqlalchemy.engine import Engine
from sqlmodel import Session

from service.errors import NotFound, Unauthorized
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


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
RedisDep = Annotated[Redis, Depends(get_redis)]


@dataclass(frozen=True)
class Principal:
    """Who is calling: an owner name and a role."""

    name: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


LOCAL_PRINCIPAL = Principal(name="local", role="admin")


def get_principal(request: Request, settings: SettingsDep) -> Principal:
    """Without `LAUNCHBAY_ADMIN_TOKEN` the service is open (a local, single-user set-up)."""
    if not settings.admin_token:
        return LOCAL_PRINCIPAL
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    if hmac.compare_digest(token.encode(), settings.admin_token.encode()):
        return Principal(name="admin", role="admin")
    raise Unauthorized("invalid token", headers={"WWW-Authenticate": "Bearer"})


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def get_owned_job(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> Job:
    """The job, if the caller may see it; others' jobs are 'not found' so ids do not leak."""
    job = session.get(Job, job_id)
    if job is None or not (principal.is_admin or job.owner == principal.name):
        raise NotFound(f"no job {job_id!r}", detail={"job_id": job_id})
    return job


OwnedJob = Annotated[Job, Depends(get_owned_job)]
