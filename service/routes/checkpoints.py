"""The checkpoint registry of a job, and downloads with ETag and Range, from the artifact
store (service/checkpoint_source.py) or by a redirect to it."""

import re
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Header
from starlette.responses import FileResponse, RedirectResponse, Response, StreamingResponse

from service import records
from service.artifacts import store_for
from service.checkpoint_source import CheckpointSource, checkpoint_source
from service.deps import OwnedJob, SessionDep, SettingsDep
from service.errors import BadRequest, LaunchbayError, NotFound
from service.models import Checkpoint, Job
from service.schemas import CheckpointsPublic

router = APIRouter(prefix="/v1/jobs", tags=["checkpoints"])
SINGLE_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class RangeNotSatisfiable(LaunchbayError):
    status, code = 416, "range_not_satisfiable"


class CheckpointFile(FileResponse):
    chunk_size = 1024 * 1024


@router.get("/{job_id}/checkpoints", response_model=CheckpointsPublic)
def list_checkpoints(job: OwnedJob, session: SessionDep) -> CheckpointsPublic:
    """The job's live checkpoints, oldest first, with `best` and `latest` marked."""
    rows = records.list_checkpoints(session, job.id)
    return CheckpointsPublic.marked(job.job_spec().checkpoint, rows)


@router.get("/{job_id}/checkpoints/{ref}/download", response_class=FileResponse)
def download_checkpoint(
    job: OwnedJob,
    ref: str,
    session: SessionDep,
    settings: SettingsDep,
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> Response:
    """The checkpoint's bytes (a directory: its tar stream), or with presigned downloads on,
    a 307 to the store's short-lived URL of the same bytes (the ETag is still the sha256)."""
    checkpoint = resolve_checkpoint(job, ref, records.list_checkpoints(session, job.id))
    artifacts = store_for(settings)
    etag = f'"{checkpoint.sha256}"'
    if artifacts.remote and settings.s3_presigned_downloads:
        if range_header is not None:  # refused here, with the error body, not by the store
            check_range(range_header, checkpoint.size)
        url = artifacts.presign_get(checkpoint.path, settings.s3_presign_ttl_s)
        if url is not None:
            return RedirectResponse(url, status_code=307, headers={"etag": etag})
    return _serve(checkpoint_source(artifacts, settings, job.name, checkpoint), etag, range_header)


@router.head("/{job_id}/checkpoints/{ref}/download", response_class=FileResponse)
def head_checkpoint(
    job: OwnedJob,
    ref: str,
    session: SessionDep,
    settings: SettingsDep,
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> Response:
    """The download's headers (Content-Length, ETag, Accept-Ranges), without the body."""
    checkpoint = resolve_checkpoint(job, ref, records.list_checkpoints(session, job.id))
    source = checkpoint_source(store_for(settings), settings, job.name, checkpoint)
    if source.path is not None:  # the file response sends headers only to a HEAD request
        return _serve(source, f'"{checkpoint.sha256}"', range_header)
    headers = _headers(source, f'"{checkpoint.sha256}"')
    headers["content-length"] = str(source.size)
    return Response(status_code=200, headers=headers, media_type=source.media_type)


def _headers(source: CheckpointSource, etag: str) -> dict[str, str]:
    disposition = f"attachment; filename*=utf-8''{quote(source.filename)}"
    return {"etag": etag, "accept-ranges": "bytes", "content-disposition": disposition}


def _serve(source: CheckpointSource, etag: str, range_header: str | None) -> Response:
    if range_header is not None:
        check_range(range_header, source.size)
    if source.path is not None:
        return CheckpointFile(
            source.path,
            media_type=source.media_type,
            filename=source.filename,
            headers={"etag": etag, "accept-ranges": "bytes"},
        )
    assert source.read is not None
    read = source.read
    headers = _headers(source, etag)
    span = single_range(range_header, source.size) if range_header is not None else None
    if span is None:  # no Range, or several: the whole stream
        headers["content-length"] = str(source.size)
        return StreamingResponse(read(0, None), headers=headers, media_type=source.media_type)
    start, end = span
    headers["content-length"] = str(end - start)
    headers["content-range"] = f"bytes {start}-{end - 1}/{source.size}"
    return StreamingResponse(
        read(start, end), status_code=206, headers=headers, media_type=source.media_type
    )


def single_range(header: str, size: int) -> tuple[int, int] | None:
    """(start, end exclusive) of a one-range header already checked by `check_range`; None
    for several ranges (answered with the whole stream)."""
    parts = [part.strip() for part in header.split(",")]
    if len(parts) != 1:
        return None
    match = SINGLE_RANGE.match(parts[0] if parts[0].startswith("bytes=") else f"bytes={parts[0]}")
    assert match is not None
    first, last = match.groups()
    if not first:  # the last N bytes
        return max(0, size - int(last)), size
    return int(first), min(size, int(last) + 1) if last else size


def resolve_checkpoint(job: Job, ref: str, checkpoints: list[Checkpoint]) -> Checkpoint:
    """`ref` is a checkpoint id, `latest` (the highest seq), or `best`
    (`CheckpointPolicy.named_best`: the one the listing marks `best`)."""
    if not checkpoints:
        raise NotFound(f"job {job.id} has no checkpoints", detail={"ref": ref})
    if ref == "latest":
        return max(checkpoints, key=lambda c: c.seq)
    if ref == "best":
        policy = job.job_spec().checkpoint
        best = policy.named_best(checkpoints, metrics=lambda c: c.metrics, seq=lambda c: c.seq)
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
