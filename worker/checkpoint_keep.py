"""Launchbay's own copy of a checkpoint, so that registered means kept: whatever the program does
to its files afterwards (rotation, overwrite in place, truncation, deletion), what was registered
stays downloadable, byte for byte its sha256, until Launchbay's retention removes it.

`snapshot_file` and `snapshot_tree` copy a checkpoint (a file, or a directory's files) into a
staging name beside where it is kept (``checkpoints/<job>/``, the worker's, which no job
writes), hashing as they go, exactly as `service.artifacts.tree` streams a directory: the
sha256 is of the copy's bytes. A copy is a reflink where the filesystem has them (no bytes
written; the copy is then read once to hash it), else the bytes are read once, hashed and
written. A hard link would not do: the program's name and Launchbay's would be one file, and a
`torch.save` to the same name truncates it in place.

The caller checks that the source did not change while it was copied (then the copy is whole
and consistent), and only then publishes it: renamed into place with the local store, sent to
the remote store from the copy (which nothing can change under the upload), then removed.

Each source file is opened without following a link and must still be the regular file, of the
size (and inode) that was reported; under a job user it must be that user's own (a hard link to
another user's file is refused: its bytes are not the job's to publish).
"""

import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.artifacts.tree import (
    BLOCK,
    CHUNK,
    END_OF_ARCHIVE,
    ManifestEntry,
    TreeFile,
    header_of,
)
from worker.clone import reflink

FILE_MODE, DIR_MODE = 0o640, 0o750


class KeepRefused(Exception):
    """The source cannot be kept as it is (the message says why); not retried."""


@dataclass(frozen=True)
class KeepPlace:
    """Where copies are made (`staging`: a directory of the worker's on the same filesystem as
    the kept checkpoints) and published (`root`: the data dir, where a key is a path), whose
    files they must be (`job_uid`), and the group that reads them (`group`: the data dir's, for
    the API)."""

    staging: Path
    root: Path
    job_uid: int | None = None
    group: int | None = None


@dataclass(frozen=True)
class Snapshot:
    path: Path
    size: int
    sha256: str
    kind: str = "file"
    files: int = 1
    manifest: list[dict[str, Any]] | None = None

    def discard(self) -> None:
        discard(self.path)


def discard(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _open_source(path: Path, size: int, inode: int | None, job_uid: int | None) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise KeepRefused(f"{path.name} cannot be opened: {exc}") from None
    st = os.fstat(fd)
    why = None
    if not stat.S_ISREG(st.st_mode) or st.st_size != size or inode not in (None, st.st_ino):
        why = f"{path.name} changed since it was reported"
    elif job_uid is not None and st.st_uid != job_uid:
        why = f"{path.name} is not the job's own file (a link to another user's file)"
    if why is not None:
        os.close(fd)
        raise KeepRefused(why)
    return fd


def _chunks(fd: int, size: int) -> Iterator[bytes]:
    left = size
    os.lseek(fd, 0, os.SEEK_SET)
    while left > 0:
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            raise KeepRefused("it got shorter while it was copied")
        left -= len(chunk)
        yield chunk


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


# How reading is paced: `worker.checkpoint_upload.Pace.chunks`, or None (full speed).
Paced = Callable[[Iterator[bytes]], Iterator[bytes]] | None


def _copy_one(src_fd: int, dst_fd: int, size: int, pace: Paced) -> Iterator[bytes]:
    """Copy `src_fd` to `dst_fd` and yield the copy's bytes (to hash), at the pace."""
    cloned = reflink(src_fd, dst_fd)
    chunks = _chunks(dst_fd if cloned else src_fd, size)
    for chunk in chunks if pace is None else pace(chunks):
        if not cloned:
            _write_all(dst_fd, chunk)
        yield chunk


def _finish(fd: int, mode: int, place: KeepPlace) -> None:
    os.fchmod(fd, mode)
    if place.group is not None:
        os.fchown(fd, -1, place.group)


def snapshot_file(
    source: Path, size: int, inode: int | None, place: KeepPlace, pace: Paced = None
) -> Snapshot:
    """A copy of the file `source` under a staging name, hashed."""
    part = place.staging / f".keep-{uuid.uuid4().hex}"
    src_fd = _open_source(source, size, inode, place.job_uid)
    try:
        dst_fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            digest = hashlib.sha256()
            for chunk in _copy_one(src_fd, dst_fd, size, pace):
                digest.update(chunk)
            _finish(dst_fd, FILE_MODE, place)
        finally:
            os.close(dst_fd)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    finally:
        os.close(src_fd)
    return Snapshot(part, size, digest.hexdigest())


def snapshot_tree(
    source: Path, files: list[TreeFile], place: KeepPlace, pace: Paced = None
) -> Snapshot:
    """A copy of the directory `source` (its `files`, in canonical order) under a staging name,
    with the sha256 and manifest of its canonical tar stream (`service.artifacts.tree`)."""
    root = place.staging / f".keep-{uuid.uuid4().hex}"
    whole, manifest, size = hashlib.sha256(), [], 0
    try:
        root.mkdir(mode=DIR_MODE)
        for file in files:
            target = root / file.path
            target.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
            header = header_of(file.path, file.size)
            whole.update(header)
            one = hashlib.sha256()
            src_fd = _open_source(source / file.path, file.size, file.inode, place.job_uid)
            try:
                flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                dst_fd = os.open(target, flags, 0o600)
                try:
                    for chunk in _copy_one(src_fd, dst_fd, file.size, pace):
                        one.update(chunk)
                        whole.update(chunk)
                    _finish(dst_fd, FILE_MODE, place)
                finally:
                    os.close(dst_fd)
            finally:
                os.close(src_fd)
            pad = bytes(-file.size % BLOCK)
            whole.update(pad)
            size += len(header) + file.size + len(pad)
            manifest.append(ManifestEntry(file.path, file.size, one.hexdigest()).as_dict())
        whole.update(END_OF_ARCHIVE)
        for directory, _, _ in os.walk(root):
            if place.group is not None:
                os.chown(directory, -1, place.group)
            os.chmod(directory, DIR_MODE)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    total = size + len(END_OF_ARCHIVE)
    return Snapshot(root, total, whole.hexdigest(), "dir", len(files), manifest)


def publish_local(snapshot: Snapshot, target: Path) -> None:
    """Rename the copy into place as `target`, replacing what was there (an earlier save under
    the same name, whose row the registration retires)."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if snapshot.kind == "file" and not (target.is_dir() and not target.is_symlink()):
        os.replace(snapshot.path, target)
        return
    aside = target.with_name(f".{target.name}.{uuid.uuid4().hex}.replaced")
    if target.exists() or target.is_symlink():
        os.rename(target, aside)
    try:
        os.rename(snapshot.path, target)
    finally:
        discard(aside)
