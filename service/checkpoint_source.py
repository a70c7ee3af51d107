"""Where the API reads a checkpoint's bytes from: the artifact store, or the data dir.

A file checkpoint in the local store is served from its file (service/routes/checkpoints.py
hands that to the file response, with multi-range support); everything else is a stream of
a known length that can start anywhere: an object in a remote store (its directory
checkpoints are stored as their canonical tar), or a local directory checkpoint, packed on
the fly from its manifest (service/artifacts/tree.py).
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from service.artifacts import ArtifactStore, ObjectMissing, StoreError
from service.artifacts.tree import iter_tar, tar_size
from service.errors import NotFound, ServiceUnavailable
from service.models import Checkpoint
from service.settings import Settings

TAR_MEDIA_TYPE = "application/x-tar"
OCTET_STREAM = "application/octet-stream"


@dataclass(frozen=True)
class CheckpointSource:
    size: int
    media_type: str
    filename: str
    # A local file, served as a file; else `read(start, end)` streams a part.
    path: Path | None = None
    read: Callable[[int, int | None], Iterator[bytes]] | None = None
    key: str | None = None


def _gone(checkpoint: Checkpoint) -> NotFound:
    return NotFound(
        f"the file of checkpoint {checkpoint.id} is gone",
        detail={"checkpoint_id": checkpoint.id},
    )


def download_name(job_name: str, checkpoint: Checkpoint) -> str:
    name = f"{job_name}-{Path(checkpoint.path).name}"
    return f"{name}.tar" if checkpoint.kind == "dir" else name


def checkpoint_source(
    store: ArtifactStore, settings: Settings, job_name: str, checkpoint: Checkpoint
) -> CheckpointSource:
    """The checkpoint's bytes, as the download serves them; 404 when they are gone, 503 when
    the store does not answer."""
    is_dir = checkpoint.kind == "dir"
    media = TAR_MEDIA_TYPE if is_dir else OCTET_STREAM
    name = download_name(job_name, checkpoint)
    if store.remote:
        try:
            size = store.size(checkpoint.path)
        except ObjectMissing:
            raise _gone(checkpoint) from None
        except StoreError as exc:
            raise ServiceUnavailable(
                f"the artifact store did not answer: {exc}", detail={"store": store.name}
            ) from None
        key = checkpoint.path
        return CheckpointSource(
            size, media, name, read=lambda s, e: store.get(key, s, e), key=checkpoint.path
        )
    # Inside the job's own directory: its files are the job user's, who may link anywhere.
    job_dir = settings.layout.kept_checkpoints(checkpoint.job_id).resolve()
    path = (settings.data_dir.resolve() / checkpoint.path).resolve()
    if not path.is_relative_to(job_dir):
        raise _gone(checkpoint)
    if not is_dir:
        if not path.is_file():
            raise _gone(checkpoint)
        return CheckpointSource(path.stat().st_size, media, name, path=path)
    files = [(str(f["path"]), int(f["size"])) for f in checkpoint.manifest or []]
    if not path.is_dir() or not files:
        raise _gone(checkpoint)
    return CheckpointSource(
        tar_size(files), media, name, read=lambda s, e: iter_tar(path, files, s, e)
    )
