"""Uploaded user code: `POST /v1/code` stores a .py, .zip or .tar.gz for jobs to run."""

import logging

from fastapi import APIRouter, Request, Response, status
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from service import code_store, policy
from service.deps import CurrentPrincipal, SessionDep, SettingsDep
from service.uploads import receive_file

log = logging.getLogger("launchbay.api")
router = APIRouter(prefix="/v1/code", tags=["code"])


class CodePublic(BaseModel):
    code_id: str
    sha256: str
    size: int


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
    openapi_extra=UPLOAD_BODY,
)
async def upload_code(
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
) -> CodePublic:
    """201 when the caller uploads these bytes for the first time, 200 when again."""
    policy.check_may_run_code(principal, settings)
    code_dir = settings.code_dir
    code_dir.mkdir(parents=True, exist_ok=True)
    received = await receive_file(
        request,
        field="file",
        directory=code_dir,
        max_bytes=settings.max_upload_bytes,
        check_filename=code_store.upload_kind,
    )
    limits = code_store.UnpackLimits(
        max_files=settings.max_code_files, max_bytes=settings.max_code_unpacked_bytes
    )
    try:
        await run_in_threadpool(code_store.store_upload, received, code_dir, limits)
    finally:
        received.path.unlink(missing_ok=True)
    created = await run_in_threadpool(code_store.record_upload, session, received, principal.name)
    if not created:
        response.status_code = status.HTTP_200_OK
    log.info(
        "code %s (%r, %d bytes) uploaded by %s",
        received.sha256,
        received.filename,
        received.size,
        principal.name,
    )
    return CodePublic(code_id=received.sha256, sha256=received.sha256, size=received.size)
