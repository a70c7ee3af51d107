"""A directory as one canonical tar stream, so a directory checkpoint has one sha256, one size
and one download, whatever store keeps it.

The stream is the directory's regular files in the order of their relative paths (POSIX,
sorted by their UTF-8 bytes), each a PAX-format header with the path and size and nothing
else that varies (mode 0644, owner 0:0, no names, mtime 0), its bytes, padded to 512, then
two zero blocks. The same files always give the same bytes, so its sha256 (the checkpoint's
`sha256`) is a hash of the directory's content and names; its length is known from the
manifest alone, so a Range of it is served without building what precedes.

A directory holding a symlink, a device or anything but files and directories is refused:
what it points at is not the checkpoint's to copy.
"""

import hashlib
import os
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

BLOCK = 512
# A checkpoint's bytes are read, hashed and handed on in pieces that stay in the reading core's
# own L2 cache: 8 MiB pieces went through the L3 cache the ranks share at every pass, which
# slowed a rank on the next core more (P9c in docs/benchmarks.md).
CHUNK = 256 * 1024
END_OF_ARCHIVE = bytes(2 * BLOCK)


class TreeRefused(ValueError):
    """A directory that cannot be a checkpoint (the message says why)."""


@dataclass(frozen=True)
class TreeFile:
    path: str  # relative, POSIX
    size: int
    mtime_ns: int
    inode: int


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


def scan_tree(root: Path) -> list[TreeFile]:
    """The regular files under `root`, in canonical order; TreeRefused for anything else."""
    found: list[TreeFile] = []
    for directory, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            full = Path(directory) / name
            st = full.lstat()
            rel = full.relative_to(root).as_posix()
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise TreeRefused(f"{rel!r} is not a regular file or directory")
            found.append(TreeFile(rel, st.st_size, st.st_mtime_ns, st.st_ino))
    if not found:
        raise TreeRefused("the directory holds no files")
    return sorted(found, key=lambda f: f.path.encode("utf-8", "surrogateescape"))


def header_of(path: str, size: int) -> bytes:
    info = tarfile.TarInfo(path)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _padding(size: int) -> int:
    return -size % BLOCK


def tar_size(files: list[tuple[str, int]]) -> int:
    """The canonical stream's length for (path, size) pairs."""
    return sum(len(header_of(p, s)) + s + _padding(s) for p, s in files) + len(END_OF_ARCHIVE)


def iter_tar(
    root: Path, files: list[tuple[str, int]], start: int = 0, end: int | None = None
) -> Iterator[bytes]:
    """Bytes `start` to `end` (exclusive; None: to the end) of the canonical stream of the
    (path, size) files under `root`. A file whose length changed, or that now leads out of
    `root` (a directory above it swapped for a link), raises TreeRefused."""
    base = root.resolve()
    offset = 0
    for rel, size in files:
        header = header_of(rel, size)
        for piece_len, source in ((len(header), header), (size, rel), (_padding(size), None)):
            piece_end = offset + piece_len
            if piece_len and piece_end > start and (end is None or offset < end):
                lo = max(start, offset) - offset
                hi = piece_len if end is None else min(end, piece_end) - offset
                if isinstance(source, bytes):
                    yield source[lo:hi]
                elif source is None:
                    yield bytes(hi - lo)
                else:
                    if not (root / source).resolve().is_relative_to(base):
                        raise TreeRefused(f"{source!r} leads out of the directory")
                    yield from _read_file(root / source, lo, hi, size)
            offset = piece_end
    piece_end = offset + len(END_OF_ARCHIVE)
    if piece_end > start and (end is None or offset < end):
        lo = max(start, offset) - offset
        hi = len(END_OF_ARCHIVE) if end is None else min(end, piece_end) - offset
        yield END_OF_ARCHIVE[lo:hi]


def open_regular(path: Path, size: int, inode: int | None = None) -> BinaryIO:
    """`path` opened for reading, refused unless it is still a regular file of `size` bytes
    (and of `inode`, when given): not a symlink swapped in since it was listed (the final
    component is not followed; a directory above swapped for a link changes the inode)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise TreeRefused(f"{path.name} cannot be opened: {exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size != size or inode not in (None, st.st_ino):
        os.close(fd)
        raise TreeRefused(f"{path.name} changed since it was listed")
    return os.fdopen(fd, "rb")


def _read_file(
    path: Path, lo: int, hi: int, size: int, inode: int | None = None
) -> Iterator[bytes]:
    with open_regular(path, size, inode) as handle:
        handle.seek(lo)
        left = hi - lo
        while left > 0:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                raise TreeRefused(f"{path.name} is shorter than its manifest says")
            left -= len(chunk)
            yield chunk


class TreeDigest:
    """The canonical stream of a tree, hashed as it goes out: the whole stream's sha256 and
    each file's (its manifest). Iterate `stream()` once (to upload it, or only to hash it)."""

    def __init__(self, root: Path, files: list[TreeFile]) -> None:
        self.root, self.files = root, files
        self.sha256 = ""
        self.size = 0
        self.manifest: list[ManifestEntry] = []

    def stream(self) -> Iterator[bytes]:
        whole = hashlib.sha256()
        manifest: list[ManifestEntry] = []
        size = 0
        for file in self.files:
            header = header_of(file.path, file.size)
            whole.update(header)
            yield header
            one = hashlib.sha256()
            for chunk in _read_file(self.root / file.path, 0, file.size, file.size, file.inode):
                one.update(chunk)
                whole.update(chunk)
                yield chunk
            pad = bytes(_padding(file.size))
            whole.update(pad)
            yield pad
            size += len(header) + file.size + len(pad)
            manifest.append(ManifestEntry(file.path, file.size, one.hexdigest()))
        whole.update(END_OF_ARCHIVE)
        yield END_OF_ARCHIVE
        self.size = size + len(END_OF_ARCHIVE)
        self.sha256, self.manifest = whole.hexdigest(), manifest


def extract_tar(source: BinaryIO, target: Path) -> int:
    """Unpack a tar stream into the new directory `target` (regular files and directories
    only, nothing outside it); returns the files written. TreeRefused for anything else,
    a damaged stream included."""
    target.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=source, mode="r|") as archive:
            return sum(_extract_member(archive, member, target) for member in archive)
    except tarfile.TarError as exc:
        raise TreeRefused(f"not a readable tar stream: {exc}") from None


def _extract_member(archive: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> int:
    rel = PurePosixPath(member.name)
    if rel.is_absolute() or ".." in rel.parts:
        raise TreeRefused(f"{member.name!r} lies outside the directory")
    if member.isdir():
        (target / rel).mkdir(parents=True, exist_ok=True)
        return 0
    if not member.isreg():
        raise TreeRefused(f"{member.name!r} is not a regular file")
    out = target / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    data = archive.extractfile(member)
    assert data is not None  # a regular member has data
    with open(out, "wb") as handle:
        while chunk := data.read(CHUNK):
            handle.write(chunk)
    return 1
