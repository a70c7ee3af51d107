"""Uploaded user code: `POST /v1/code` stores a .py, .zip or .tar.gz for jobs to run;
`GET /v1/code` lists the caller's uploads; `GET /v1/code/{code_id}` says whether the caller
has uploaded those bytes (404 otherwise, whoever else did: nobody learns what another owner
uploaded), so a client sends a directory only when it is new; `DELETE /v1/code/{code_id}`
takes an upload back. What an upload may be is `GET /v1/limits` (service.routes.limits)."""

import logging
from dataclasses import replace
from datetime import datetime

from fastapi import APIRouter, Request, Response, status
from pydantic import BaseModel
from sqlmodel import Session, col, select
from starlette.concurrency import run_in_threadpool

from service import code_store, code_usage, policy
from service.artifacts import store_for
from service.deps import CurrentPrincipal, RedisDep, SessionDep, SettingsDep
from service.errors import NotFound
from service.models import CodeUpload
from service.settings import Settings
from service.uploads import ReceivedFile, receive_file

log = logging.getLogger("launchbay.api")
router = APIRouter(prefix="/v1/code", tags=["code"])
# `GET /v1/code` lists at most this many uploads (the newest).
MAX_LISTED = 1000


class CodePublic(BaseModel):
    code_id: str
    sha256: str
    size: int


class CodeUploadPublic(CodePublic):
    """One of the caller's uploads, as `GET /v1/code` lists it."""

    filename: str
    unpacked_size: int
    created_at: datetime
    # A job of the caller's that has not finished runs it (`DELETE` answers 409 until then).
    in_use: bool


class CodeUploadsPublic(BaseModel):
    items: list[CodeUploadPublic]


# The route reads its body itself (service.uploads); this documents it for clients and tools.
UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {"file": {"type": "string", "format": "binary"}},
                }
            }
        },
    }
}


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=CodePublic,
    responses={200: {"model": CodePublic, "description": "The caller had uploaded these bytes"}},
    openapi_extra=UPLOAD_BODY,
)
async def upload_code(
    request: Request,
    response: Response,
    session: SessionDep,
    redis: RedisDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
) -> CodePublic:
    """201 when the caller uploads these bytes for the first time, 200 when again."""
    policy.check_may_run_code(principal, settings)
    await run_in_threadpool(
        code_usage.check_upload_rate, redis, principal.name, settings.uploads_per_minute
    )
    code_dir = settings.code_dir
    code_dir.mkdir(parents=True, exist_ok=True)
    received = await receive_file(
        request,
        field="file",
        directory=code_dir,
        max_bytes=settings.max_upload_bytes,
        check_filename=code_store.upload_kind,
    )
    try:
        limits = await run_in_threadpool(_limits_for, session, settings, principal.name, received)
        unpacked = await run_in_threadpool(code_store.store_upload, received, code_dir, limits)
    finally:
        received.path.unlink(missing_ok=True)
    await run_in_threadpool(
        code_store.keep_in_store, store_for(settings), code_dir, received.sha256
    )
    created = await run_in_threadpool(
        code_store.record_upload, session, received, principal.name, unpacked
    )
    if not created:
        response.status_code = status.HTTP_200_OK
    log.info(
        "code %s (%r, %d bytes, %d unpacked) uploaded by %s",
        received.sha256,
        received.filename,
        received.size,
        unpacked,
        principal.name,
    )
    return CodePublic(code_id=received.sha256, sha256=received.sha256, size=received.size)


def _limits_for(
    session: Session, settings: Settings, owner: str, received: ReceivedFile
) -> code_store.UnpackLimits:
    """The unpack limits of this upload, with what is left of the owner's quotas (413 when
    the upload itself does not fit). Sending one's own upload again costs nothing."""
    limits = code_store.UnpackLimits(
        max_files=settings.max_code_files, max_bytes=settings.max_code_unpacked_bytes
    )
    if code_store.find_upload(session, received.sha256, owner) is not None:
        return limits
    usage = code_usage.owner_usage(session, owner)
    code_usage.check_stored_quota(usage, received.size, settings.code_quota_bytes)
    left = settings.code_quota_unpacked_bytes - usage.unpacked_bytes
    return replace(limits, quota_left=left)


@router.get("", response_model=CodeUploadsPublic)
def list_code(session: SessionDep, principal: CurrentPrincipal) -> CodeUploadsPublic:
    """The caller's own uploads (an admin's too: only their own), newest first."""
    stmt = (
        select(CodeUpload)
        .where(CodeUpload.owner == principal.name)
        .order_by(col(CodeUpload.created_at).desc(), col(CodeUpload.code_id))
        .limit(MAX_LISTED)
    )
    in_use = code_usage.codes_in_use(session, principal.name)
    return CodeUploadsPublic(
        items=[
            CodeUploadPublic(
                code_id=row.code_id,
                sha256=row.code_id,
                size=row.size,
                filename=row.filename,
                unpacked_size=row.unpacked_size,
                created_at=row.created_at,
                in_use=row.code_id in in_use,
            )
            for row in session.exec(stmt)
        ]
    )


@router.get("/{code_id}", response_model=CodePublic)
def get_code(
    code_id: str, session: SessionDep, settings: SettingsDep, principal: CurrentPrincipal
) -> CodePublic:
    """The caller's own upload of `code_id` (an admin's too: only their own); 404 for bytes
    the caller has not uploaded, or whose files are gone."""
    upload = None
    if code_usage.CODE_ID.fullmatch(code_id):
        upload = code_store.find_upload(session, code_id, principal.name)
    if upload is None or not (settings.code_dir / code_id).is_dir():
        shown = code_id[:64]
        raise NotFound(f"you have uploaded no code {shown!r}", detail={"code_id": shown})
    return CodePublic(code_id=code_id, sha256=code_id, size=upload.size)


@router.head("/{code_id}", response_model=CodePublic)
def head_code(
    code_id: str, session: SessionDep, settings: SettingsDep, principal: CurrentPrincipal
) -> CodePublic:
    """The GET's status and headers, without the body."""
    return get_code(code_id, session, settings, principal)


@router.delete("/{code_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_code(
    code_id: str,
    session: SessionDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
) -> Response:
    """204; 404 for code the caller did not upload; 409 while an unfinished job runs it."""
    code_usage.delete_upload(session, settings.code_dir, code_id, principal)
    if not (settings.code_dir / code_id).exists():
        code_store.drop_from_store(store_for(settings), code_id)
    log.info("code %s deleted by %s", code_id, principal.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
