"""The checkpoint registry of a job, and downloads with ETag and Range."""

import re
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header
from starlette.responses import FileResponse

from service import store
from service.deps import OwnedJob, SessionDep, SettingsDep
from service.errors import BadRequest, LaunchbayError, NotFound
from service.models import Checkpoint, Job
from service.schemas import CheckpointPublic, CheckpointsPublic

router = APIRouter(prefix="/v1/jobs", tags=["checkpoints"])
SINGLE_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class RangeNotSatisfiable(LaunchbayError):
    status, code = 416, "range_not_satisfiable"


class CheckpointFile(FileResponse):
    chunk_size = 1024 * 1024


@router.get("/{job_id}/checkpoints", response_model=CheckpointsPublic)
def list_checkpoints(job: OwnedJob, session: SessionDep) -> CheckpointsPublic:
    rows = store.list_checkpoints(session, job.id)
    return CheckpointsPublic(items=[CheckpointPublic.from_row(r) for r in rows])


@router.get("/{job_id}/checkpoints/{ref}/download", response_class=FileResponse)
def download_checkpoint(
    job: OwnedJob,
    ref: str,
    session: SessionDep,
    settings: SettingsDep,
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> FileResponse:
    checkpoint = resolve_checkpoint(job, ref, store.list_checkpoints(session, job.id))
    # Inside the job's own directory: its files are the job user's, who may link anywhere.
    job_dir = (settings.checkpoints_dir / job.id).resolve()
    path = (settings.data_dir.resolve() / checkpoint.path).resolve()
    if not path.is_relative_to(job_dir) or not path.is_file():
        raise NotFound(
            f"the file of checkpoint {checkpoint.id} is gone",
            detail={"checkpoint_id": checkpoint.id},
        )
    if range_header is not None:
        check_range(range_header, path.stat().st_size)
    return CheckpointFile(
        path,
        media_type="application/octet-stream",
        filename=f"{job.name}-{Path(checkpoint.path).name}",
        headers={"etag": f'"{checkpoint.sha256}"', "accept-ranges": "bytes"},
    )


@router.head("/{job_id}/checkpoints/{ref}/download", response_class=FileResponse)
def head_checkpoint(
    job: OwnedJob,
    ref: str,
    session: SessionDep,
    settings: SettingsDep,
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> FileResponse:
    """The download's headers (Content-Length, ETag, Accept-Ranges), without the body: the
    file response sends headers only to a HEAD request."""
    return download_checkpoint(job, ref, session, settings, range_header)


def resolve_checkpoint(job: Job, ref: str, checkpoints: list[Checkpoint]) -> Checkpoint:
    """`ref` is a checkpoint id, `latest`, or `best` (`CheckpointPolicy.best` by the spec's
    `best_metric`; the latest when the job names no best metric)."""
    if not checkpoints:
        raise NotFound(f"job {job.id} has no checkpoints", detail={"ref": ref})
    if ref == "latest":
        return checkpoints[-1]
    if ref == "best":
        policy = job.job_spec().checkpoint
        if not policy.best_metric:
            return checkpoints[-1]
        best = policy.best(checkpoints, metrics=lambda c: c.metrics, seq=lambda c: c.seq)
        if best is None:
            raise NotFound(
                f"no checkpoint of job {job.id} has the metric {policy.best_metric!r}",
                detail={"ref": ref, "best_metric": policy.best_metric},
            )
        return best
    for checkpoint in checkpoints:
        if checkpoint.id == ref:
            return checkpoint
    raise NotFound(f"job {job.id} has no checkpoint {ref!r}", detail={"ref": ref})


def check_range(header: str, size: int) -> None:
    """Refuse, with the error body, the ranges the file server would answer in plain text."""
    ranges = [part.strip() for part in header.split(",")]
    for part in ranges:
        match = SINGLE_RANGE.match(part if part.startswith("bytes=") else f"bytes={part}")
        if not match or match.groups() == ("", ""):
            raise BadRequest(f"malformed Range header {header!r}", code="invalid_range")
        start, end = match.groups()
        if start and end and int(start) > int(end):
            raise BadRequest(f"malformed Range header {header!r}", code="invalid_range")
        if start and int(start) >= size:
            raise RangeNotSatisfiable(
                f"range starts past the end of the {size}-byte file",
                detail={"size": size},
                headers={"content-range": f"bytes */{size}"},
            )
