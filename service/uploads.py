"""Receiving one file of a multipart/form-data body as it streams in.

Starlette's form parser spools files to the system's temp dir, and nothing of an upload may
be written outside the data dir, nor held whole in memory. So `POST /v1/code` reads its
body itself: each chunk of the file part is hashed, counted against the limit and appended
to a temporary file in the directory the caller names, as it arrives. Any failure removes
that file before the error goes out.
"""

import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request

from service.errors import BadRequest, PayloadTooLarge, Unprocessable

TEMP_PREFIX = ".upload-"


@dataclass(frozen=True)
class ReceivedFile:
    """An uploaded file, complete on disk under a temporary name the caller must remove."""

    path: Path
    filename: str
    size: int
    sha256: str


def _missing_file(field: str, why: str) -> Unprocessable:
    detail = [{"loc": ["body", field], "msg": why, "type": "missing"}]
    return Unprocessable(f"invalid request: {field}: {why}", detail=detail)


def _base_name(raw: bytes) -> str:
    """The file name without any directory a client put in front of it."""
    name = raw.decode("utf-8", errors="replace")
    return name.replace("\\", "/").rsplit("/", 1)[-1].strip()


class FileFieldReader:
    """Feeds a multipart body to python-multipart and keeps the one file part named `field`.

    `check_filename` sees the file's name as soon as its part headers arrive, so a refused
    name costs no bytes on disk.
    """

    def __init__(
        self,
        content_type: str,
        *,
        field: str,
        directory: Path,
        max_bytes: int,
        check_filename: Callable[[str], Any],
    ) -> None:
        kind, options = parse_options_header(content_type)
        boundary = options.get(b"boundary")
        if kind != b"multipart/form-data" or not boundary:
            raise _missing_file(field, "expected a multipart/form-data body with a file part")
        self.field, self.directory, self.max_bytes = field, directory, max_bytes
        self.check_filename = check_filename
        self.path = directory / f"{TEMP_PREFIX}{uuid.uuid4().hex}"
        self._file: BinaryIO | None = None
        self._hasher = hashlib.sha256()
        self._size = 0
        self._filename: str | None = None
        self._complete = False
        self._in_file_part = False
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        callbacks: Any = {
            "on_part_begin": self._on_part_begin,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
        }
        self._parser = MultipartParser(boundary, callbacks)

    def feed(self, chunk: bytes) -> None:
        try:
            self._parser.write(chunk)
        except MultipartParseError as exc:
            raise BadRequest(f"the multipart body is malformed: {exc}") from None

    def finish(self) -> ReceivedFile:
        try:
            self._parser.finalize()
        except MultipartParseError as exc:
            raise BadRequest(f"the multipart body is malformed: {exc}") from None
        if self._filename is None:
            raise _missing_file(self.field, f"a file part named {self.field!r} is required")
        if not self._complete or self._file is None:
            raise BadRequest("the upload ended before the file did")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        return ReceivedFile(self.path, self._filename, self._size, self._hasher.hexdigest())

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)

    def _on_part_begin(self) -> None:
        self._disposition = b""
        self._in_file_part = False

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        if self._header_name.strip().lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name = self._header_value = b""

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        if options.get(b"name", b"").decode("utf-8", errors="replace") != self.field:
            return
        if b"filename" not in options:
            raise _missing_file(self.field, f"{self.field!r} must be a file, not a text field")
        if self._filename is not None:
            raise Unprocessable(f"send one file per upload (two {self.field!r} parts came)")
        filename = _base_name(options[b"filename"])
        self.check_filename(filename)
        self._filename = filename
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        self._file = os.fdopen(fd, "wb")
        self._in_file_part = True

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if not self._in_file_part or self._file is None:
            return  # other fields are bounded by the body limit and ignored
        piece = data[start:end]
        self._size += len(piece)
        if self._size > self.max_bytes:
            raise PayloadTooLarge(
                f"the uploaded file is larger than {self.max_bytes} bytes",
                detail={"max_upload_bytes": self.max_bytes},
            )
        self._hasher.update(piece)
        self._file.write(piece)

    def _on_part_end(self) -> None:
        if self._in_file_part:
            self._complete = True
            self._in_file_part = False


async def receive_file(
    request: Request,
    *,
    field: str,
    directory: Path,
    max_bytes: int,
    check_filename: Callable[[str], Any],
) -> ReceivedFile:
    """Stream the body's file part `field` into `directory`; the caller removes `.path`."""
    reader = FileFieldReader(
        request.headers.get("content-type", ""),
        field=field,
        directory=directory,
        max_bytes=max_bytes,
        check_filename=check_filename,
    )
    try:
        async for chunk in request.stream():
            if chunk:
                # Disk writes and hashing stay off the event loop.
                await run_in_threadpool(reader.feed, chunk)
        return await run_in_threadpool(reader.finish)
    except ClientDisconnect:
        reader.discard()
        raise BadRequest("the client went away before the upload was complete") from None
    except BaseException:
        reader.discard()
        raise
