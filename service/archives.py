"""Unpacking untrusted archives safely, member by member (never extractall).

Every member name must be a relative path without `..`, backslashes or NULs; links (symbolic
and hard), devices and FIFOs are refused outright, so no path can be redirected anywhere;
the member count, the depth of a name and the bytes actually written are capped, whatever
the archive's headers claim. Files are created with O_EXCL | O_NOFOLLOW. A refusal raises
`Unprocessable` (`invalid_upload`) or `PayloadTooLarge` (`archive_too_large`); the caller
removes the half-filled directory.

What the archive modules would read whole before any of that counts is bounded first:

- tar: `tarfile` reads a GNU long name or long link (`././@LongLink`) and a pax extended
  header into memory in one piece, whatever size its header block declares (a gzip of 0.5
  MB can declare 512 MiB). `BoundedTarInfo` is the `TarInfo` class `tarfile` builds each
  header with; its `_proc_member` (the documented hook for subclasses) sees the declared
  size before `tarfile` reads the data and refuses more than `MAX_EXTENDED_HEADER_BYTES`,
  more than `MAX_EXTENDED_HEADERS_IN_A_ROW` such headers before one member (each nests a
  call), and sparse members (no use in code, and their maps are read whole too). Doing it
  in `tarfile`'s own parser, rather than in a pre-scan of our own, keeps one reading of the
  format: a pre-scan that skipped data differently from `tarfile` could be led past a bomb.
- zip: `ZipFile` reads the whole central directory at once and builds an object per entry;
  the end record's entry count and directory size are checked before it does.

Error messages and details name a member by at most `SHOWN_NAME_CHARS` characters.
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
# A long name, long link or pax header larger than this is refused before it is read.
MAX_EXTENDED_HEADER_BYTES = 64 * 1024
MAX_EXTENDED_HEADERS_IN_A_ROW = 8
# Room in a zip's central directory per member (its fixed part is 46 bytes, plus name, extra
# field and comment), and for any archive.
ZIP_DIRECTORY_BYTES_PER_MEMBER = 1024
ZIP_DIRECTORY_SLACK_BYTES = 64 * 1024
SHOWN_NAME_CHARS = 200
# Levels (path components) a member's name may have. Real code nests a few dozen at most;
# much deeper trees break the tools that walk them one call per level on Python's recursion
# limit (`Path.mkdir(parents=True)` here, `shutil.copytree` and `rmtree` on the worker).
MAX_MEMBER_DEPTH = 100
EXTENDED_HEADER_TYPES = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)
# What reading a damaged archive raises, besides its module's own error.
ARCHIVE_READ_ERRORS = (EOFError, zlib.error, OSError, NotImplementedError, RuntimeError)


def shown(name: str) -> str:
    """A member name cut to `SHOWN_NAME_CHARS` characters, for messages and details."""
    return name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "..."


def refuse(message: str, member: str | None = None) -> Unprocessable:
    detail = {"member": None if member is None else shown(member)}
    return Unprocessable(message, code="invalid_upload", detail=detail)


def member_refused(name: str, why: str) -> Unprocessable:
    return refuse(f"archive member {shown(name)!r} {why}", name)


@dataclass(frozen=True)
class UnpackLimits:
    max_files: int
    max_bytes: int
    # What is left of the owner's quota on unpacked bytes (None: no quota).
    quota_left: int | None = None


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
            raise member_refused(name, "has a backslash or NUL in its name")
        if name.startswith("/"):
            raise member_refused(name, "is an absolute path")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise member_refused(name, "points outside the archive ('..')")
        if len(parts) > MAX_MEMBER_DEPTH:
            raise member_refused(name, f"is nested more than {MAX_MEMBER_DEPTH} levels deep")
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
            raise member_refused(name, "has no file name")
        self.check_room(declared)
        target = self.root / relative
        self._make_dirs(target.parent, name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        try:
            fd = os.open(target, flags, 0o755 if executable else 0o644)
        except FileExistsError:
            raise member_refused(name, "appears twice") from None
        except OSError as exc:
            raise self._name_problem(exc, name) from exc
        with os.fdopen(fd, "wb") as out:
            while chunk := _read(source, name):
                self.check_room(len(chunk))
                self.written += len(chunk)
                out.write(chunk)
        self.files += 1

    def check_room(self, more: int) -> None:
        if self.written + more > self.limits.max_bytes:
            raise PayloadTooLarge(
                f"the archive unpacks to more than {self.limits.max_bytes} bytes",
                code="archive_too_large",
                detail={"max_code_unpacked_bytes": self.limits.max_bytes},
            )
        left = self.limits.quota_left
        if left is not None and self.written + more > left:
            raise PayloadTooLarge(
                f"the archive unpacks to more than the {max(left, 0)} bytes left of your quota "
                "for unpacked code; delete uploads you no longer need (DELETE /v1/code/{code_id})",
                code="quota_exceeded",
                detail={"quota": "code_quota_unpacked_bytes", "left_bytes": max(left, 0)},
            )

    def _make_dirs(self, directory: Path, name: str) -> None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise member_refused(name, "clashes with a file of the same name") from None
        except OSError as exc:
            raise self._name_problem(exc, name) from exc

    @staticmethod
    def _name_problem(exc: OSError, name: str) -> Exception:
        if exc.errno in (errno.ENAMETOOLONG, errno.EINVAL, errno.EILSEQ):
            return member_refused(name, "has a name this server cannot store")
        return exc


def _read(source: IO[bytes], name: str) -> bytes:
    try:
        return source.read(CHUNK)
    except (zipfile.BadZipFile, tarfile.TarError, *ARCHIVE_READ_ERRORS) as exc:
        raise member_refused(name, f"cannot be read: {_said(exc)}") from None


def _said(exc: BaseException) -> str:
    return shown(str(exc))


def _zip_directory(archive: Path) -> tuple[int, int] | None:
    """The member count and the central directory's size in the zip's end record, read
    before ZipFile reads that directory whole and builds an object per entry."""
    # Private to zipfile, but unchanged for many years; without them ZipFile counts alone.
    end_record = getattr(zipfile, "_EndRecData", None)
    entries_total = getattr(zipfile, "_ECD_ENTRIES_TOTAL", None)
    directory_size = getattr(zipfile, "_ECD_SIZE", None)
    if end_record is None or entries_total is None or directory_size is None:
        return None
    with archive.open("rb") as fh:
        record = end_record(fh)
    return None if record is None else (int(record[entries_total]), int(record[directory_size]))


def check_zip_directory(archive: Path, unpacker: Unpacker) -> None:
    """Refuse a zip whose end record declares more members, or a larger central directory,
    than the limits allow."""
    declared = _zip_directory(archive)
    if declared is None:
        return
    members, directory_bytes = declared
    unpacker.count(members)
    unpacker.members = 0
    max_files = unpacker.limits.max_files
    bound = max_files * ZIP_DIRECTORY_BYTES_PER_MEMBER + ZIP_DIRECTORY_SLACK_BYTES
    if directory_bytes > bound:
        raise PayloadTooLarge(
            f"the archive's central directory is {directory_bytes} bytes, more than the "
            f"{bound} bytes {max_files} members may take",
            code="archive_too_large",
            detail={"max_code_files": max_files, "max_directory_bytes": bound},
        )


def unpack_zip(archive: Path, unpacker: Unpacker) -> None:
    try:
        check_zip_directory(archive, unpacker)
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, *ARCHIVE_READ_ERRORS):
        raise refuse("the file is not a zip archive") from None
    with zf:
        infos = zf.infolist()
        # What the entries declare is refused before a byte is written; what they really
        # hold is counted again as it is written.
        unpacker.check_room(sum(info.file_size for info in infos if not info.is_dir()))
        for info in infos:
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if stat.S_ISLNK(mode):
                raise member_refused(info.filename, "is a link")
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise member_refused(info.filename, "is not a file")
            if info.is_dir():
                unpacker.add_dir(info.filename)
                continue
            try:
                source = zf.open(info)
            except (zipfile.BadZipFile, *ARCHIVE_READ_ERRORS) as exc:
                raise member_refused(info.filename, f"cannot be read: {_said(exc)}") from None
            with source:
                unpacker.add_file(info.filename, source, bool(mode & 0o100), info.file_size)


class _HeaderRefused(Exception):
    """Raised through tarfile's parser (which re-raises what it does not know) to refuse."""

    def __init__(self, refusal: Unprocessable) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class BoundedTarInfo(tarfile.TarInfo):
    """A TarInfo that refuses extended headers larger than `MAX_EXTENDED_HEADER_BYTES` (or
    too many in a row) and sparse members, before tarfile reads their data."""

    def _proc_member(self, reader: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in EXTENDED_HEADER_TYPES:
            in_a_row = getattr(reader, "_launchbay_extended_in_a_row", 0) + 1
            if self.size > MAX_EXTENDED_HEADER_BYTES:
                raise _HeaderRefused(
                    refuse(
                        f"the archive has an extended header (long name or pax) of {self.size}"
                        f" bytes; at most {MAX_EXTENDED_HEADER_BYTES} are accepted"
                    )
                )
            if in_a_row > MAX_EXTENDED_HEADERS_IN_A_ROW:
                raise _HeaderRefused(
                    refuse(
                        f"the archive has more than {MAX_EXTENDED_HEADERS_IN_A_ROW} extended "
                        "headers before one member"
                    )
                )
            reader._launchbay_extended_in_a_row = in_a_row  # type: ignore[attr-defined]
        else:
            reader._launchbay_extended_in_a_row = 0  # type: ignore[attr-defined]
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise _HeaderRefused(member_refused(self.name, "is a sparse file"))
        return super()._proc_member(reader)  # type: ignore[misc]

    def _proc_gnusparse_10(self, member: tarfile.TarInfo, pax: object, reader: object) -> None:
        raise _HeaderRefused(member_refused(member.name, "is a sparse file"))


def unpack_tar(archive: Path, unpacker: Unpacker) -> None:
    with archive.open("rb") as fh:
        if fh.read(2) != b"\x1f\x8b":
            raise refuse("the file is not a gzip-compressed tar archive")
    try:
        tf = tarfile.open(archive, mode="r:gz", tarinfo=BoundedTarInfo)
    except _HeaderRefused as exc:
        raise exc.refusal from None
    except (tarfile.TarError, *ARCHIVE_READ_ERRORS):
        raise refuse("the file is not a gzip-compressed tar archive") from None
    with tf:
        while True:
            try:
                member = tf.next()
            except _HeaderRefused as exc:
                raise exc.refusal from None
            except (tarfile.TarError, *ARCHIVE_READ_ERRORS) as exc:
                raise refuse(f"the archive is damaged: {_said(exc)}") from None
            if member is None:
                return
            if member.issym() or member.islnk():
                raise member_refused(member.name, "is a link")
            if member.isdir():
                unpacker.add_dir(member.name)
            elif member.isreg():
                source = tf.extractfile(member)
                assert source is not None  # a regular member always has data
                with source:
                    unpacker.add_file(member.name, source, bool(member.mode & 0o100), member.size)
            else:
                raise member_refused(member.name, "is not a file")


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
