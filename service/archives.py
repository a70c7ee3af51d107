"""Unpacking untrusted archives safely, member by member (never extractall).

Every member name must be a relative path without `..`, backslashes or NULs; links (symbolic
and hard), devices and FIFOs are refused outright, so no path can be redirected anywhere;
the member count and the bytes actually written are capped, whatever the archive's headers
claim. Files are created with O_EXCL | O_NOFOLLOW. A refusal raises `Unprocessable`
(`invalid_upload`) or `PayloadTooLarge` (`archive_too_large`); the caller removes the
half-filled directory.
"""

import codecs
import errno
import os
import stat
import tarfile
import tokenize
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from service.errors import PayloadTooLarge, Unprocessable

CHUNK = 1024 * 1024
# What reading a damaged archive raises, besides its module's own error.
ARCHIVE_READ_ERRORS = (EOFError, zlib.error, OSError, NotImplementedError, RuntimeError)


def refuse(message: str, member: str | None = None) -> Unprocessable:
    return Unprocessable(message, code="invalid_upload", detail={"member": member})


@dataclass(frozen=True)
class UnpackLimits:
    max_files: int
    max_bytes: int


class Unpacker:
    """Writes members into `root`, checking each name and counting members and bytes."""

    def __init__(self, root: Path, limits: UnpackLimits) -> None:
        self.root, self.limits = root, limits
        self.members = 0
        self.files = 0
        self.written = 0

    def relative(self, name: str) -> Path:
        """The member's path under root; refuses absolute paths, `..` and odd characters."""
        if "\x00" in name or "\\" in name:
            raise refuse(f"archive member {name!r} has a backslash or NUL in its name", name)
        if name.startswith("/"):
            raise refuse(f"archive member {name!r} is an absolute path", name)
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise refuse(f"archive member {name!r} points outside the archive ('..')", name)
        return Path(*parts) if parts else Path()

    def count(self, more: int = 1) -> None:
        self.members += more
        if self.members > self.limits.max_files:
            raise PayloadTooLarge(
                f"the archive has more than {self.limits.max_files} members",
                code="archive_too_large",
                detail={"max_code_files": self.limits.max_files},
            )

    def add_dir(self, name: str) -> None:
        self.count()
        relative = self.relative(name)
        if relative.parts:
            self._make_dirs(self.root / relative, name)

    def add_file(self, name: str, source: IO[bytes], executable: bool, declared: int) -> None:
        self.count()
        relative = self.relative(name)
        if not relative.parts:
            raise refuse(f"archive member {name!r} has no file name", name)
        self._check_room(declared)
        target = self.root / relative
        self._make_dirs(target.parent, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:
            fd = os.open(target, flags, 0o755 if executable else 0o644)
        except FileExistsError:
            raise refuse(f"archive member {name!r} appears twice", name) from None
        except OSError as exc:
            raise self._name_problem(exc, name) from exc
        with os.fdopen(fd, "wb") as out:
            while chunk := _read(source, name):
                self._check_room(len(chunk))
                self.written += len(chunk)
                out.write(chunk)
        self.files += 1

    def _check_room(self, more: int) -> None:
        if self.written + more > self.limits.max_bytes:
            raise PayloadTooLarge(
                f"the archive unpacks to more than {self.limits.max_bytes} bytes",
                code="archive_too_large",
                detail={"max_code_unpacked_bytes": self.limits.max_bytes},
            )

    def _make_dirs(self, directory: Path, name: str) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise refuse(
                f"archive member {name!r} clashes with a file of the same name", name
            ) from None
        except OSError as exc:
            raise self._name_problem(exc, name) from exc

    @staticmethod
    def _name_problem(exc: OSError, name: str) -> Exception:
        if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ):
            return refuse(f"archive member {name!r} has a name this server cannot store", name)
        return exc


def _read(source: IO[bytes], name: str) -> bytes:
    try:
        return source.read(CHUNK)
    except (zipfile.BadZipFile, tarfile.TarError, *ARCHIVE_READ_ERRORS) as exc:
        raise refuse(f"archive member {name!r} cannot be read: {exc}", name) from None


def _zip_entry_count(archive: Path) -> int | None:
    """The member count in the zip's end record, read before ZipFile loads every entry
    (a central directory of millions of tiny entries would otherwise fill the memory)."""
    # Private to zipfile, but unchanged for many years; without them ZipFile counts alone.
    end_record = getattr(zipfile, "_EndRecData", None)
    entries_total = getattr(zipfile, "_ECD_ENTRIES_TOTAL", None)
    if end_record is None or entries_total is None:
        return None
    with archive.open("rb") as fh:
        record = end_record(fh)
    return None if record is None else int(record[entries_total])


def unpack_zip(archive: Path, unpacker: Unpacker) -> None:
    try:
        declared = _zip_entry_count(archive)
        if declared is not None:
            unpacker.count(declared)
            unpacker.members = 0
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, *ARCHIVE_READ_ERRORS):
        raise refuse("the file is not a zip archive") from None
    with zf:
        for info in zf.infolist():
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if stat.S_ISLNK(mode):
                raise refuse(f"archive member {info.filename!r} is a link", info.filename)
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise refuse(f"archive member {info.filename!r} is not a file", info.filename)
            if info.is_dir():
                unpacker.add_dir(info.filename)
                continue
            try:
                source = zf.open(info)
            except (zipfile.BadZipFile, *ARCHIVE_READ_ERRORS) as exc:
                raise refuse(f"archive member {info.filename!r}: {exc}", info.filename) from None
            with source:
                unpacker.add_file(info.filename, source, bool(mode & 0o100), info.file_size)


def unpack_tar(archive: Path, unpacker: Unpacker) -> None:
    with archive.open("rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            raise refuse("the file is not a gzip-compressed tar archive")
    try:
        tf = tarfile.open(archive, mode="r:gz")
    except (tarfile.TarError, *ARCHIVE_READ_ERRORS):
        raise refuse("the file is not a gzip-compressed tar archive") from None
    with tf:
        while True:
            try:
                member = tf.next()
            except (tarfile.TarError, *ARCHIVE_READ_ERRORS) as exc:
                raise refuse(f"the archive is damaged: {exc}") from None
            if member is None:
                return
            if member.issym() or member.islnk():
                raise refuse(f"archive member {member.name!r} is a link", member.name)
            if member.isdir():
                unpacker.add_dir(member.name)
            elif member.isreg():
                source = tf.extractfile(member)
                assert source is not None  # a regular member always has data
                with source:
                    unpacker.add_file(member.name, source, bool(member.mode & 0o100), member.size)
            else:
                raise refuse(f"archive member {member.name!r} is not a file", member.name)


def check_python_source(path: Path) -> None:
    """Refuses a .py upload that is not text in its declared encoding (UTF-8 by default)."""
    with path.open("rb") as fh:
        try:
            # A lambda, so the error message cannot name the temporary file.
            encoding, _ = tokenize.detect_encoding(lambda: fh.readline())
        except SyntaxError as exc:
            raise refuse(f"the file is not Python source: {exc}") from None
        fh.seek(0)
        decoder = codecs.getincrementaldecoder(encoding)()
        try:
            while chunk := fh.read(CHUNK):
                if b"\x00" in chunk:
                    raise refuse("the file is not Python source (it holds NUL bytes)")
                decoder.decode(chunk)
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise refuse(f"the file is not Python source (not valid {encoding})") from None
