"""Jobs: submit, list, read, cancel, delete."""

import hashlib
import json
import logging
import shutil
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status
from redis import Redis
from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError

from jobs.spec import JobSpec
from jobs.states import ACTIVE_STATES, ExitReason, JobState
from service import code_store, policy, quota, records
from service.artifacts import ArtifactStore, StoreError, checkpoints_prefix, store_for
from service.deps import (
    CurrentPrincipal,
    ExecutorDep,
    JobSnapshot,
    OwnedJob,
    RedisDep,
    SessionDep,
    SettingsDep,
)
from service.errors import (
    Conflict,
    InvalidTransition,
    ServiceUnavailable,
)
from service.executors.base import ExecutorUnavailable
from service.models import Job
from service.routes.job_filters import JobFiltersDep
from service.scheduling.submission import check_schedulable
from service.schemas import JobPublic, JobsPublic
from service.worker_fit import check_worker_fit
from service.worker_records import stored_worker_records

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
    executor: ExecutorDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> JobPublic:
    spec = policy.apply_submission_policy(spec, principal, settings)
    workers = _stored_worker_records(redis)  # read once for the two checks below
    check_schedulable(session, workers, spec, principal, settings)
    if spec.code is not None:
        owner = None if principal.is_admin else principal.name
        code_store.check_code_ref(session, settings.code_dir, spec.code, owner=owner)
    request_hash = spec_hash(spec)
    if idempotency_key:
        existing = records.find_job_by_idempotency_key(session, principal.name, idempotency_key)
        if existing is not None:
            return _replay(existing, request_hash, response)
    # After the replay: a retry with its key is never refused for the rate or the workers.
    warnings = check_worker_fit(workers, spec)
    quota.check_disk_quota(session, principal, settings)
    policy.check_submission_rate(redis, principal.name, settings.submissions_per_minute)
    try:
        job = records.create_job(
            session,
            spec,
            owner=principal.name,
            idempotency_key=idempotency_key or None,
            request_hash=request_hash,
            warnings=warnings,
        )
    except IntegrityError:
        # Another request with the same key committed first.
        session.rollback()
        assert idempotency_key
        existing = records.find_job_by_idempotency_key(session, principal.name, idempotency_key)
        if existing is None:
            raise
        return _replay(existing, request_hash, response)
    _enqueue(executor, job)
    log.info("job %s submitted by %s to queue %s", job.id, principal.name, job.queue)
    return JobPublic.model_validate(job)


def _stored_worker_records(redis: Redis) -> list[bytes | str] | None:
    """The live workers' records, unread; None when Redis does not answer (the job is then
    accepted without the checks that need them, and the executor says so)."""
    try:
        return stored_worker_records(redis)
    except RedisError as exc:
        log.warning("workers unknown at submission (Redis: %s)", exc)
        return None


def _enqueue(executor: ExecutorDep, job: Job) -> None:
    try:
        executor.submit(job)
    except ExecutorUnavailable as exc:
        log.warning("job %s stored but not enqueued: %s", job.id, exc)
        raise ServiceUnavailable(
            "the job was stored but the queue is unreachable; it will be enqueued when "
            "Redis is back",
            code="queue_unavailable",
            detail={"job_id": job.id},
        ) from exc


def _replay(existing: Job, request_hash: str, response: Response) -> JobPublic:
    if existing.request_hash != request_hash:
        raise Conflict(
            "this Idempotency-Key was already used with a different job spec",
            code="idempotency_key_reused",
            detail={"job_id": existing.id},
        )
    response.status_code = status.HTTP_200_OK
    return JobPublic.model_validate(existing)


@router.get("", response_model=JobsPublic)
def list_jobs(
    session: SessionDep,
    settings: SettingsDep,
    filters: JobFiltersDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> JobsPublic:
    rows, total, estimated = filters.page(session, settings, limit, offset)
    return JobsPublic(
        items=[JobPublic.model_validate(j) for j in rows],
        total=total,
        total_is_estimate=estimated,
    )


@router.get("/{job_id}", response_model=JobPublic)
async def get_job(job: JobSnapshot) -> JobPublic:
    # No I/O here: the dependency read the row in the thread pool.
    return JobPublic.model_validate(job)


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic)
def cancel_job(job: OwnedJob, session: SessionDep, executor: ExecutorDep) -> JobPublic:
    """A cancel is a change of the job's state, the one channel every attempt's supervisor
    reads; the executor only withdraws what has not started."""
    state = JobState(job.state)
    if state is JobState.QUEUED and records.transition_job(
        session,
        job.id,
        JobState.CANCELLED,
        attempt=job.attempt,
        exit_reason=ExitReason.CANCELLED,
        message="cancelled before it started",
    ):
        _withdraw(executor, job)
    elif state in ACTIVE_STATES:
        records.transition_job(session, job.id, JobState.CANCELLING, attempt=job.attempt)
    session.refresh(job)
    if JobState(job.state).is_terminal() and job.state != JobState.CANCELLED:
        raise InvalidTransition(
            f"job {job.id} already ended ({job.state})", detail={"state": job.state}
        )
    return JobPublic.model_validate(job)


def _withdraw(executor: ExecutorDep, job: Job) -> None:
    try:
        executor.cancel(job)
    except ExecutorUnavailable as exc:
        # The worker re-checks the database before it starts anything.
        log.info("job %s cancelled; its queue entry could not be removed: %s", job.id, exc)


def drop_job_checkpoints(artifacts: ArtifactStore, job_id: str) -> None:
    """A remote store's copies of a job's checkpoints (the local store's went with the dir)."""
    if artifacts.remote:
        try:
            artifacts.delete_prefix(checkpoints_prefix(job_id))
        except StoreError:
            log.warning("job %s: its checkpoints could not be deleted from the store", job_id)


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_job(job: OwnedJob, session: SessionDep, settings: SettingsDep) -> Response:
    if not JobState(job.state).is_terminal():
        raise InvalidTransition(
            f"job {job.id} is {job.state}; only a finished job can be deleted (cancel it first)",
            detail={"state": job.state},
        )
    records.delete_job_rows(session, job.id)
    for folder in settings.layout.job_dirs(job.id):
        shutil.rmtree(folder, ignore_errors=True)
    drop_job_checkpoints(store_for(settings), job.id)
    log.info("job %s deleted", job.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
