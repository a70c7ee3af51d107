"""What an attempt takes from the artifact store before its launch, when this worker does not
hold it: the job's uploaded code (by its sha256, into the worker's code cache) and the
checkpoint it resumes from. With the local store both are in the data dir already.

A fetched object lands under a temporary name and is renamed into place once complete and
verified against its sha256, so a fetch cut short leaves nothing a later attempt would take
for whole.
"""

import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import Engine

from service.artifacts import ArtifactStore, StoreError, code_key
from service.artifacts.tree import TreeRefused, extract_tar
from service.db import session_scope
from service.models import Checkpoint
from service.records import list_checkpoints

log = logging.getLogger(__name__)


class _HashingReader:
    """A file-like view of a byte stream that hashes what passes."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.buffer = chunks, b""
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self.buffer) < size:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.digest.update(chunk)
            self.buffer += chunk
        if size < 0:
            out, self.buffer = self.buffer, b""
        else:
            out, self.buffer = self.buffer[:size], self.buffer[size:]
        return out

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def fetch_tree(store: ArtifactStore, key: str, target: Path, sha256: str | None) -> None:
    """Unpack the tar object `key` as the directory `target` (whole, or not at all)."""
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex}.fetch")
    try:
        reader = _HashingReader(store.get(key))
        extract_tar(reader, staging)  # type: ignore[arg-type]
        reader.drain()
        if sha256 is not None and reader.digest.hexdigest() != sha256:
            raise StoreError(f"{key} does not match its sha256")
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def fetch_code(store: ArtifactStore, code_dir: Path, code_id: str) -> bool:
    """Make sure `code_dir/<code_id>` is here; False when neither here nor in the store."""
    target = code_dir / code_id
    if target.is_dir() or not store.remote:
        return target.is_dir()
    code_dir.mkdir(parents=True, exist_ok=True)
    try:
        fetch_tree(store, code_key(code_id), target, None)
    except OSError:
        if target.is_dir():  # another attempt on this worker fetched it first
            return True
        raise
    except (StoreError, TreeRefused) as exc:
        log.warning("code %s could not be fetched from the store: %s", code_id, exc)
        return target.is_dir()
    log.info("code %s fetched from the store", code_id)
    return True


def _local_copy_ok(path: Path, checkpoint: Checkpoint) -> bool:
    if checkpoint.kind == "dir":
        return path.is_dir()
    return path.is_file() and path.stat().st_size == checkpoint.size


def fetch_checkpoint(store: ArtifactStore, checkpoint: Checkpoint, data_dir: Path) -> Path | None:
    """The checkpoint on this worker's disk (fetched from the store when missing); None when
    it cannot be had."""
    path = data_dir / checkpoint.path
    if _local_copy_ok(path, checkpoint):
        return path
    if not store.remote:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if checkpoint.kind == "dir":
            shutil.rmtree(path, ignore_errors=True)
            fetch_tree(store, checkpoint.path, path, checkpoint.sha256)
        else:
            got = store.get_to_file(checkpoint.path, path)
            if got.sha256 != checkpoint.sha256:
                path.unlink(missing_ok=True)
                raise StoreError(f"{checkpoint.path} does not match its sha256")
    except (StoreError, TreeRefused, OSError) as exc:
        log.warning("checkpoint %s could not be fetched: %s", checkpoint.id, exc)
        return None
    log.info("checkpoint %s fetched from the store to %s", checkpoint.id, path)
    return path


def find_resume_checkpoint(
    engine: Engine, job_id: str, attempt: int, data_dir: Path, store: ArtifactStore
) -> Path | None:
    """The latest checkpoint registered by an earlier attempt that this worker holds or can
    fetch from the store."""
    if attempt == 1:
        return None  # no earlier attempt (and no query in the work horse's critical path)
    with session_scope(engine) as session:
        earlier = [c for c in list_checkpoints(session, job_id) if c.attempt < attempt]
    for checkpoint in reversed(earlier):
        found = fetch_checkpoint(store, checkpoint, data_dir)
        if found is not None:
            return found
    return None
