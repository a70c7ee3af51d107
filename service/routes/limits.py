"""`GET /v1/limits`: what the API takes of an upload, so that a client can refuse a directory
over them before sending a byte of it (`launchbay run`), and name the files to leave out."""

from fastapi import APIRouter
from pydantic import BaseModel

from service.deps import SettingsDep

router = APIRouter(prefix="/v1/limits", tags=["code"])


class LimitsPublic(BaseModel):
    max_upload_bytes: int
    max_code_files: int
    max_code_unpacked_bytes: int


@router.get("", response_model=LimitsPublic)
def get_limits(settings: SettingsDep) -> LimitsPublic:
    """The most an upload may be (413 beyond), hold and unpack to (413 archive_too_large)."""
    return LimitsPublic(
        max_upload_bytes=settings.max_upload_bytes,
        max_code_files=settings.max_code_files,
        max_code_unpacked_bytes=settings.max_code_unpacked_bytes,
    )
