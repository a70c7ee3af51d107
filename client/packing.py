"""A directory packed for `launchbay run`: one deterministic `.tar.gz`, checked against the
API's limits before a byte is sent.

The archive holds the files `client.selection` chooses, sorted by path, as regular members
only (no directory entries: the server makes the parents), mode 0644 (0755 when the file is
executable), owner 0:0 without names, mtime 0, POSIX (pax) format, gzip with no file name and
mtime 0. The same tree gives the same bytes, so the same sha256, which is the upload's
`code_id`: the client asks the API for it first and uploads only when it is new.

Refused before anything is uploaded, with `PackError` (`code`, `message`, `detail`):
`nothing_to_pack` (every file ignored), `archive_too_large` (more files or unpacked bytes than
the API takes, naming the biggest files), `payload_too_large` (the archive itself over the
upload limit, naming the biggest files), `unreadable_file` (a file or directory that cannot be
read, or changed while it was read: all of them named).
"""

import gzip
import hashlib
import os
import re
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from client.errors import PackError
from client.models import Limits
from client.selection import IGNORE_FILE, select_files

ARCHIVE_SUFFIX = ".tar.gz"
NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME_CHARS = 200
GZIP_LEVEL = 6
SHOWN_FILES = 5


@dataclass(frozen=True)
class PackedDirectory:
    """The archive (a temporary file), the name it is uploaded under (the directory's), its
    sha256 and size, the files in it, their bytes, and what was left out that a person may
    not expect: `(path, why)`."""

    path: Path
    name: str
    sha256: str
    size: int
    files: list[str]
    unpacked_bytes: int
    skipped: list[tuple[str, str]]


@contextmanager
def temporary_archive() -> Iterator[Path]:
    """A temporary file for an archive, removed when the block ends."""
    handle, name = tempfile.mkstemp(prefix="launchbay-", suffix=".tar.gz")
    os.close(handle)
    try:
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


@contextmanager
def packed_directory(root: Path, limits: Limits) -> Iterator[PackedDirectory]:
    """Pack `root` into a temporary archive, removed when the block ends."""
    with temporary_archive() as archive:
        yield pack_directory(root, limits, archive)


def pack_directory(root: Path, limits: Limits, archive: Path) -> PackedDirectory:
    """Write `root`'s archive to `archive`, or raise PackError before it passes a limit."""
    try:
        selection = select_files(root)
    except OSError as exc:
        raise _unreadable([(_shown(root, exc.filename), exc.strerror or str(exc))]) from None
    if not selection.files:
        raise PackError(
            "nothing_to_pack",
            f"no file of {root} is left to pack: .gitignore or {IGNORE_FILE} ignores them all",
            {"directory": str(root)},
        )
    sizes = {path: os.lstat(root / path).st_size for path in selection.files}
    _check_unpacked(sizes, limits)
    sink = _Sink(archive, limits.max_upload_bytes)
    try:
        failed = _write(root, selection.files, sink)
    except _TooLarge:
        raise _too_large(
            "payload_too_large",
            f"the directory packs to more than {_size(limits.max_upload_bytes)}, the API's "
            "upload limit (LAUNCHBAY_MAX_UPLOAD_BYTES)",
            {"max_upload_bytes": limits.max_upload_bytes},
            sizes,
        ) from None
    finally:
        sink.close()
    if failed:
        raise _unreadable(failed)
    return PackedDirectory(
        path=archive,
        name=archive_name(root),
        sha256=sink.digest.hexdigest(),
        size=sink.size,
        files=selection.files,
        unpacked_bytes=sum(sizes.values()),
        skipped=selection.skipped,
    )


def archive_name(root: Path) -> str:
    """`<directory>.tar.gz`, in letters, digits and `._-` (the API records it with the
    upload)."""
    stem = NAME_CHARS.sub("-", root.absolute().name).strip("-.")[:MAX_NAME_CHARS]
    return (stem or "directory") + ARCHIVE_SUFFIX


def _check_unpacked(sizes: dict[str, int], limits: Limits) -> None:
    if len(sizes) > limits.max_code_files:
        raise _too_large(
            "archive_too_large",
            f"the directory has {len(sizes)} files to pack; the API takes at most "
            f"{limits.max_code_files} (LAUNCHBAY_MAX_CODE_FILES)",
            {"max_code_files": limits.max_code_files, "files": len(sizes)},
            sizes,
        )
    total = sum(sizes.values())
    if total > limits.max_code_unpacked_bytes:
        raise _too_large(
            "archive_too_large",
            f"the files to pack hold {_size(total)}; the API takes at most "
            f"{_size(limits.max_code_unpacked_bytes)} (LAUNCHBAY_MAX_CODE_UNPACKED_BYTES)",
            {"max_code_unpacked_bytes": limits.max_code_unpacked_bytes, "bytes": total},
            sizes,
        )


def _write(root: Path, files: list[str], sink: "_Sink") -> list[tuple[str, str]]:
    """Add each file to the archive; returns those that could not be read, with why."""
    failed: list[tuple[str, str]] = []
    gz = gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=GZIP_LEVEL, mtime=0)
    with gz, tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            try:
                fd = os.open(root / path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError as exc:
                failed.append((path, exc.strerror or str(exc)))
                continue
            with os.fdopen(fd, "rb") as source:
                member = _member(path, os.fstat(fd))
                if not failed:
                    try:
                        tar.addfile(member, source)
                    except OSError as exc:  # shrank while read; EIO...
                        failed.append((path, exc.strerror or str(exc)))
    return failed


def _member(path: str, status: os.stat_result) -> tarfile.TarInfo:
    member = tarfile.TarInfo(path)
    member.size = status.st_size
    member.mode = 0o755 if status.st_mode & 0o111 else 0o644
    member.mtime = 0
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


class _TooLarge(Exception):
    pass


class _Sink:
    """The archive's file: hashes and counts what is written, and stops past `limit`."""

    def __init__(self, path: Path, limit: int) -> None:
        self.file = path.open("wb")
        self.limit = limit
        self.digest = hashlib.sha256()
        self.size = 0
        self.over = False

    def write(self, data: bytes) -> int:
        if self.over:  # the archive's closing writes, after the refusal
            return len(data)
        self.size += len(data)
        if self.size > self.limit:
            self.over = True
            raise _TooLarge
        self.digest.update(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _too_large(code: str, message: str, detail: dict[str, Any], sizes: dict[str, int]) -> PackError:
    biggest = sorted(sizes.items(), key=lambda item: (-item[1], item[0]))[:SHOWN_FILES]
    named = ", ".join(f"{path} ({_size(size)})" for path, size in biggest)
    return PackError(
        code,
        f"{message}; the biggest files: {named}; leave out what the job does not need with "
        f"{IGNORE_FILE} (gitignore syntax)",
        {**detail, "biggest": [{"path": path, "size": size} for path, size in biggest]},
    )


def _unreadable(failed: list[tuple[str, str]]) -> PackError:
    named = "; ".join(f"{path}: {why}" for path, why in failed[:SHOWN_FILES])
    more = f" (and {len(failed) - SHOWN_FILES} more)" if len(failed) > SHOWN_FILES else ""
    return PackError(
        "unreadable_file",
        f"cannot read {named}{more}; leave such files out with {IGNORE_FILE}",
        {"files": [{"path": path, "error": why} for path, why in failed]},
    )


def _shown(root: Path, filename: Any) -> str:
    if not filename:
        return str(root)
    name = os.fsdecode(filename)
    try:
        return Path(name).relative_to(root).as_posix()
    except ValueError:
        return name


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
