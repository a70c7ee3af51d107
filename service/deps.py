"""Everything routes inject, as typed `Annotated` aliases.

FastAPI runs a plain `def` dependency in its thread pool, a hop of about as much CPU as a
small query. Those that do no I/O are `async def`, so they run on the event loop; those that
do I/O are plain `def`, so they never block it.
"""

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis import Redis
from sqlalchemy import bindparam
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from service import job_refs
from service.audit import PRINCIPAL_STATE_KEY
from service.auth import CHALLENGE, Principal, authenticate, known_principal
from service.errors import Forbidden, Unauthorized
from service.executors.base import Executor
from service.models import Job
from service.settings import Settings


async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


async def get_session(engine: Annotated[Engine, Depends(get_engine)]) -> AsyncIterator[Session]:
    # Making a session does no I/O: it takes a connection at its first query.
    session = Session(engine, expire_on_commit=False)
    try:
        yield session
    finally:
        if session.in_transaction():
            # Gives the connection back to the pool, which rolls it back: I/O.
            await run_in_threadpool(session.close)
        else:
            session.close()


async def get_redis(request: Request) -> Redis:
    redis: Redis = request.app.state.redis
    return redis


async def get_executor(request: Request) -> Executor:
    """The executor the jobs' attempts run on, made at start-up
    (`service.executors.registry.make_executor`): each queue's own."""
    executor: Executor = request.app.state.executor
    return executor


# The largest seq (a BIGINT): a larger `after` cannot match and the databases refuse it.
MAX_SEQ = 2**63 - 1

SettingsDep = Annotated[Settings, Depends(get_app_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
RedisDep = Annotated[Redis, Depends(get_redis)]
ExecutorDep = Annotated[Executor, Depends(get_executor)]

bearer = HTTPBearer(
    auto_error=False,
    description="`Authorization: Bearer <token>`: a token from POST /v1/tokens, "
    "or LAUNCHBAY_ADMIN_TOKEN.",
)


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The caller, from its bearer token; 401 without a valid one. There is no open mode.

    A token verified in the last seconds is known without the database (`service.auth`).
    Settings and engine come from the app, not as dependencies: each dependency FastAPI
    solves costs every request, and this one runs on all but the health routes.
    """
    if credentials is None:
        raise Unauthorized("missing bearer token", headers=CHALLENGE)
    admin_token = request.app.state.settings.admin_token
    principal = known_principal(admin_token, credentials.credentials)
    if principal is None:
        engine = request.app.state.engine
        principal = await run_in_threadpool(
            _authenticate, engine, admin_token, credentials.credentials
        )
    # Who the audit log names (service.audit).
    setattr(request.state, PRINCIPAL_STATE_KEY, principal)
    return principal


def _authenticate(engine: Engine, admin_token: str | None, token: str) -> Principal:
    with Session(engine) as session:
        return authenticate(session, admin_token, token)


CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def require_admin(principal: CurrentPrincipal) -> Principal:
    if not principal.is_admin:
        raise Forbidden("this needs a token with the admin role")
    return principal


AdminPrincipal = Annotated[Principal, Depends(require_admin)]


def _visible_job(job: Job | None, job_id: str, principal: Principal) -> Job:
    """The job, if the caller may see it; others' jobs are 'not found' so ids do not leak."""
    if job is None or not (principal.is_admin or job.owner == principal.name):
        raise job_refs.not_found(job_id)
    return job


def get_owned_job(job_id: str, session: SessionDep, principal: CurrentPrincipal) -> Job:
    """The job the path's `{job_id}` names (`service.job_refs`: an id, a unique prefix, a
    name, `name@N`), in this session."""
    whole = job_refs.whole_id(job_id)
    if whole is None:
        whole = job_refs.resolve_job_ref(session.connection(), job_id, principal).id
    return _visible_job(session.get(Job, whole), job_id, principal)


OwnedJob = Annotated[Job, Depends(get_owned_job)]

# Run on a Connection, not a Session: plain rows of the job's columns.
_JOB_BY_ID = select(Job).where(col(Job.id) == bindparam("job_id"))


def read_owned_job(job_id: str, request: Request, principal: CurrentPrincipal) -> Job:
    """The job as it is now, in no session: for routes that only show it. One thread-pool
    hop, and a Core read: the ORM's `Session.get` costs three times the query itself. A
    whole id is read by key; any other ref is resolved (`service.job_refs`)."""
    engine: Engine = request.app.state.engine
    whole = job_refs.whole_id(job_id)
    with engine.connect() as connection:
        if whole is None:
            return job_refs.resolve_job_ref(connection, job_id, principal)
        row = connection.execute(_JOB_BY_ID, {"job_id": whole}).first()
    job = None if row is None else Job.model_construct(**row._mapping)
    return _visible_job(job, job_id, principal)


JobSnapshot = Annotated[Job, Depends(read_owned_job)]
