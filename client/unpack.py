"""A downloaded directory checkpoint: its tar (already checked against the sha256 of the whole
stream) unpacked into a directory, and every file checked against the manifest the service
lists (path, size, sha256). Only regular files and directories are unpacked, and nothing
outside the target directory."""

import hashlib
import shutil
import tarfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from client.errors import ChecksumMismatch
from client.http import etag_value
from client.models import Checkpoint

CHUNK = 1024 * 1024


def unpack_if_directory(saved: Path, etag: str | None, checkpoints: list[Checkpoint]) -> Path:
    """A downloaded tar unpacked beside it (and removed) when it is a directory checkpoint of
    `checkpoints` (the one whose sha256 is the download's ETag); else `saved` as it is."""
    sha = etag_value(etag)
    found = [c for c in checkpoints if c.sha256 == sha]
    if not found or found[0].kind != "dir":
        return saved
    directory = saved.with_name(saved.name.removesuffix(".pt").removesuffix(".tar"))
    if directory == saved:
        directory = saved.with_name(f"{saved.name}.d")
    unpack_checkpoint(saved, directory, found[0].manifest or [])
    saved.unlink()
    return directory


def unpack_checkpoint(tar_path: Path, directory: Path, manifest: list[dict[str, Any]]) -> Path:
    """Unpack `tar_path` as `directory` (replacing it), each file verified; returns it."""
    staging = directory.with_name(f".{directory.name}.{uuid.uuid4().hex}")
    staging.mkdir(parents=True)
    expected = {str(entry["path"]): entry for entry in manifest}
    seen: set[str] = set()
    try:
        with tarfile.open(tar_path, mode="r:") as archive:
            for member in archive:
                rel = PurePosixPath(member.name)
                if rel.is_absolute() or ".." in rel.parts or not member.isreg():
                    if member.isdir() and not rel.is_absolute() and ".." not in rel.parts:
                        continue
                    raise ChecksumMismatch(str(directory), "a regular file", member.name)
                _write_member(archive, member, staging / rel, expected.get(member.name))
                seen.add(member.name)
        missing = sorted(set(expected) - seen)
        if missing:
            raise ChecksumMismatch(str(directory), f"files {missing}", "absent")
        if directory.exists():
            shutil.rmtree(directory)
        staging.rename(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def _write_member(
    archive: tarfile.TarFile, member: tarfile.TarInfo, out: Path, entry: dict[str, Any] | None
) -> None:
    if entry is None:
        raise ChecksumMismatch(str(out), "no such file in the manifest", member.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    source = archive.extractfile(member)
    assert source is not None  # a regular member has data
    digest = hashlib.sha256()
    with open(out, "wb") as handle:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
            handle.write(chunk)
    if digest.hexdigest() != entry["sha256"] or member.size != entry["size"]:
        raise ChecksumMismatch(str(out), str(entry["sha256"]), digest.hexdigest())
