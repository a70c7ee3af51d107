"""A job's artifacts: the files its ranks wrote under `LAUNCHBAY_OUTPUT_DIR`
(``<data dir>/artifacts/<job>/``) or in their working directory, kept after the job ends,
listed and downloaded.

Only regular files inside the job's directory are listed or served: a path with `..`, an
absolute path, a symbolic link (which a rank could point anywhere) or a file with another name
elsewhere (a hard link) is refused with 404. What the program wrote in its working directory
is here too, moved in when each attempt ends (worker/workdir.py).
"""

import hashlib
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header
from pydantic import BaseModel
from starlette.responses import FileResponse

from jobs.contract.data_dir import DataLayout
from service.deps import OwnedJob, SettingsDep
from service.errors import NotFound
from service.routes.checkpoints import CheckpointFile, check_range

router = APIRouter(prefix="/v1/jobs", tags=["artifacts"])
MAX_LISTED = 10_000


class ArtifactPublic(BaseModel):
    path: str  # relative to the job's output directory, with '/'
    size: int
    modified_at: datetime


class ArtifactsPublic(BaseModel):
    items: list[ArtifactPublic]
    truncated: bool = False


def artifacts_dir(data_dir: Path, job_id: str) -> Path:
    return DataLayout(data_dir.resolve()).job_artifacts(job_id)


def is_artifact(path: Path) -> bool:
    """A regular file with no other name: not a symbolic link, nor a hard link the job made to
    a file that is not its own (which the kernel allows where fs.protected_hardlinks is 0)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def walk_artifacts(root: Path) -> list[Path]:
    """The artifacts under `root` (no symbolic link followed or listed), sorted."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not (Path(dirpath) / d).is_symlink())
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if is_artifact(path):
                found.append(path)
    return found


@router.get("/{job_id}/artifacts", response_model=ArtifactsPublic)
def list_artifacts(job: OwnedJob, settings: SettingsDep) -> ArtifactsPublic:
    root = artifacts_dir(settings.data_dir, job.id)
    files = walk_artifacts(root) if root.is_dir() else []
    items = []
    for path in files[:MAX_LISTED]:
        stat = path.stat()
        items.append(
            ArtifactPublic(
                path=path.relative_to(root).as_posix(),
                size=stat.st_size,
                modified_at=datetime.fromtimestamp(stat.st_mtime, UTC),
            )
        )
    return ArtifactsPublic(items=items, truncated=len(files) > MAX_LISTED)


def artifact_file(data_dir: Path, job_id: str, relative: str) -> Path:
    """The artifact's file, or NotFound: inside the job's directory, no component a link."""
    root = artifacts_dir(data_dir, job_id)
    parts = relative.replace("\\", "/").split("/")
    if relative.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\x00" in relative:
        raise NotFound(f"job {job_id} has no artifact {relative!r}", detail={"path": relative})
    path = root
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise NotFound(f"job {job_id} has no artifact {relative!r}", detail={"path": relative})
    if not path.resolve().is_relative_to(root) or not is_artifact(path):
        raise NotFound(f"job {job_id} has no artifact {relative!r}", detail={"path": relative})
    return path


@router.get("/{job_id}/artifacts/{path:path}", response_class=FileResponse)
def download_artifact(
    job: OwnedJob,
    path: str,
    settings: SettingsDep,
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> FileResponse:
    file = artifact_file(settings.data_dir, job.id, path)
    stat = file.stat()
    if range_header is not None:
        check_range(range_header, stat.st_size)
    # A weak validator from what identifies this version of the file (not its content hash:
    # an artifact may be large and is hashed by nobody).
    tag = hashlib.sha256(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:32]
    return CheckpointFile(
        file,
        media_type="application/octet-stream",
        filename=file.name,
        headers={"etag": f'"{tag}"', "accept-ranges": "bytes"},
    )


@router.head("/{job_id}/artifacts/{path:path}", response_class=FileResponse)
def head_artifact(
    job: OwnedJob,
    path: str,
    settings: SettingsDep,
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> FileResponse:
    """The download's headers (Content-Length, ETag, Accept-Ranges), without the body."""
    return download_artifact(job, path, settings, range_header)
