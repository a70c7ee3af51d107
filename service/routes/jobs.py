"""Jobs: submit, list, read, cancel, delete."""

import hashlib
import json
import logging
import shutil
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Response, status
from redis.exceptions import RedisError
from rq.exceptions import NoSuchJobError
from sqlalchemy import func
from sqlalchemy.exc import IntegrityError
from sqlmodel import col, select

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service import code_store, policy, queue, quota, store
from service.deps import (
    CurrentPrincipal,
    JobSnapshot,
    OwnedJob,
    RedisDep,
    SessionDep,
    SettingsDep,
)
from service.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidTransition,
    ServiceUnavailable,
)
from service.models import Job
from service.schemas import JobPublic, JobsPublic

log = logging.getLogger("launchbay.api")
router = APIRouter(prefix="/v1/jobs", tags=["jobs"])


def spec_hash(spec: JobSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic,
    responses={
        200: {"model": JobPublic, "description": "The job of an earlier request with this key"}
    },
)
def submit_job(
    spec: JobSpec,
    response: Response,
    session: SessionDep,
    redis: RedisDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> JobPublic:
    spec = policy.apply_submission_policy(spec, principal, settings)
    if spec.code is not None:
        owner = None if principal.is_admin else principal.name
        code_store.check_code_ref(session, settings.code_dir, spec.code, owner=owner)
    request_hash = spec_hash(spec)
    if idempotency_key:
        existing = store.find_job_by_idempotency_key(session, principal.name, idempotency_key)
        if existing is not None:
            return _replay(existing, request_hash, response)
    # After the replay: a client retrying with its key is never refused for the rate.
    quota.check_disk_quota(session, principal, settings)
    policy.check_submission_rate(redis, principal.name, settings.submissions_per_minute)
    try:
        job = store.create_job(
            session,
            spec,
            owner=principal.name,
            idempotency_key=idempotency_key or None,
            request_hash=request_hash,
        )
    except IntegrityError:
        # Another request with the same key committed first.
        session.rollback()
        assert idempotency_key
        existing = store.find_job_by_idempotency_key(session, principal.name, idempotency_key)
        if existing is None:
            raise
        return _replay(existing, request_hash, response)
    try:
        queue.enqueue_attempt(redis, job, grace_s=settings.cancel_grace_s)
    except RedisError as exc:
        log.warning("job %s stored but not enqueued: %s", job.id, exc)
        raise ServiceUnavailable(
            "the job was stored but the queue is unreachable; it will be enqueued when "
            "Redis is back",
            code="queue_unavailable",
            detail={"job_id": job.id},
        ) from exc
    log.info("job %s submitted by %s to queue %s", job.id, principal.name, job.queue)
    return JobPublic.from_row(job)


def _replay(existing: Job, request_hash: str, response: Response) -> JobPublic:
    if existing.request_hash != request_hash:
        raise Conflict(
            "this Idempotency-Key was already used with a different job spec",
            code="idempotency_key_reused",
            detail={"job_id": existing.id},
        )
    response.status_code = status.HTTP_200_OK
    return JobPublic.from_row(existing)


@router.get("", response_model=JobsPublic)
def list_jobs(
    session: SessionDep,
    principal: CurrentPrincipal,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    name: Annotated[str | None, Query(max_length=128, description="Only jobs so named.")] = None,
    tag: Annotated[
        list[str] | None,
        Query(max_length=300, description="Only jobs with this tag, `key=value` (repeatable)."),
    ] = None,
    owner: Annotated[
        str | None, Query(max_length=128, description="Only this owner's jobs (admin only).")
    ] = None,
) -> JobsPublic:
    if owner is not None and not principal.is_admin and owner != principal.name:
        raise Forbidden("only an admin lists the jobs of other owners", detail={"owner": owner})
    if not principal.is_admin:
        owner = principal.name
    if name is None and not tag:
        rows, total = store.list_jobs(session, owner=owner, state=state, limit=limit, offset=offset)
    else:
        conditions = [*_owner_and_state(owner, state), *_name_and_tags(name, tag or [])]
        rows, total = _list_where(session, conditions, limit=limit, offset=offset)
    return JobsPublic(items=[JobPublic.from_row(j) for j in rows], total=total)


def _owner_and_state(owner: str | None, state: JobState | None) -> list[Any]:
    conditions = [] if owner is None else [col(Job.owner) == owner]
    return conditions if state is None else [*conditions, col(Job.state) == state]


def _name_and_tags(name: str | None, tags: list[str]) -> list[Any]:
    """`tags` as `key=value`; a tag's value is read from the spec's JSON on either database."""
    conditions = [] if name is None else [col(Job.name) == name]
    for item in tags:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadRequest(f"tag {item!r} is not key=value", detail={"tag": item})
        conditions.append(col(Job.spec)["tags"][key].as_string() == value)
    return conditions


def _list_where(
    session: SessionDep, conditions: list[Any], *, limit: int, offset: int
) -> tuple[list[Job], int]:
    total = session.exec(select(func.count()).select_from(Job).where(*conditions)).one()
    stmt = (
        select(Job)
        .where(*conditions)
        .order_by(col(Job.created_at).desc(), col(Job.id).desc())
        .offset(offset)
        .limit(limit)
    )
    return list(session.exec(stmt).all()), int(total)


@router.get("/{job_id}", response_model=JobPublic)
async def get_job(job: JobSnapshot) -> JobPublic:
    # No I/O here: the dependency read the row in the thread pool.
    return JobPublic.from_row(job)


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic)
def cancel_job(job: OwnedJob, session: SessionDep, redis: RedisDep) -> JobPublic:
    state = JobState(job.state)
    if state is JobState.QUEUED and store.transition_job(
        session,
        job.id,
        JobState.CANCELLED,
        attempt=job.attempt,
        exit_reason=ExitReason.CANCELLED,
        message="cancelled before it started",
    ):
        _drop_from_queue(redis, job)
    elif state in (JobState.STARTING, JobState.RUNNING, JobState.CANCELLING):
        store.transition_job(session, job.id, JobState.CANCELLING, attempt=job.attempt)
        try:
            queue.request_cancel(redis, job.id)
        except RedisError as exc:
            # The database says `cancelling` already, and the job's supervisor reads it at its
            # next heartbeat: the cancel is accepted, only later than through Redis.
            log.warning(
                "job %s: cancel not signalled through Redis (%s); its worker "
                "finds it at its next heartbeat",
                job.id,
                exc,
            )
    session.refresh(job)
    if JobState(job.state).is_terminal() and job.state != JobState.CANCELLED:
        raise InvalidTransition(
            f"job {job.id} already ended ({job.state})", detail={"state": job.state}
        )
    return JobPublic.from_row(job)


def _drop_from_queue(redis: RedisDep, job: Job) -> None:
    try:
        queue.drop_queued_attempt(redis, job)
    except (RedisError, NoSuchJobError) as exc:
        # The worker re-checks the database before it starts anything.
        log.info("job %s cancelled; its queue entry could not be removed: %s", job.id, exc)


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_job(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> Response:
    if not JobState(job.state).is_terminal():
        raise InvalidTransition(
            f"job {job.id} is {job.state}; only a finished job can be deleted (cancel it first)",
            detail={"state": job.state},
        )
    store.delete_job_rows(session, job.id)
    for folder in (settings.checkpoints_dir, settings.runs_dir):
        shutil.rmtree(folder / job.id, ignore_errors=True)
    log.info("job %s deleted", job.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
