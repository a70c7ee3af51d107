"""Uploaded code: checked, unpacked and kept once per content under `<data dir>/code/`.

    code/<code_id>/...     an upload, unpacked (a .py upload: that one file under its name)
    code/.upload-<hex>     a body streaming in (service.uploads)
    code/.unpack-<hex>/    an upload being unpacked (service.archives), renamed to
                           <code_id> once complete, so a code dir is never seen half-made

`code_id` is the sha256 of the uploaded bytes, so the same upload is stored once however
often and by whomever it is sent; a `code_upload` row per (code_id, owner) says who may run it.
A refused upload leaves nothing behind.
"""

import errno
import logging
import os
import shutil
import uuid
from pathlib import Path

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from jobs.spec import CodeRef
from service.archives import (
    Unpacker,
    UnpackLimits,
    check_python_source,
    refuse,
    unpack_tar,
    unpack_zip,
)
from service.artifacts import ArtifactStore, ObjectMissing, StoreError, code_key
from service.artifacts.tree import TreeDigest, scan_tree
from service.errors import ServiceUnavailable, Unprocessable
from service.models import CodeUpload
from service.uploads import ReceivedFile

log = logging.getLogger("launchbay.api")
UNPACK_PREFIX = ".unpack-"
KINDS = {".py": "python", ".zip": "zip", ".tar.gz": "tar", ".tgz": "tar"}
MAX_FILENAME_CHARS = 255  # CodeUpload.filename


def upload_kind(filename: str) -> str:
    """The kind of upload (python, zip or tar) its file name says; refuses any other name."""
    if len(filename) > MAX_FILENAME_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in filename):
        raise Unprocessable(
            f"the file name must be at most {MAX_FILENAME_CHARS} characters, without control "
            "characters",
            code="invalid_upload",
            detail={"filename": filename[:MAX_FILENAME_CHARS]},
        )
    lowered = filename.lower()
    for suffix, kind in KINDS.items():
        if lowered.endswith(suffix) and len(filename) > len(suffix):
            return kind
    raise Unprocessable(
        f"cannot use {filename!r}: upload a .py file, a .zip or a .tar.gz (.tgz)",
        code="unsupported_file_type",
        detail={"filename": filename, "allowed": sorted(KINDS)},
    )


def unpack_upload(received: ReceivedFile, target: Path, limits: UnpackLimits) -> int:
    """Unpack `received` into the new directory `target`; returns the bytes written."""
    target.mkdir(mode=0o755)
    kind = upload_kind(received.filename)
    unpacker = Unpacker(target, limits)
    if kind == "python":
        check_python_source(received.path)
        with received.path.open("rb") as source:
            unpacker.add_file(received.filename, source, False, received.size)
        return unpacker.written
    (unpack_zip if kind == "zip" else unpack_tar)(received.path, unpacker)
    if unpacker.files == 0:
        raise refuse("the archive holds no files")
    return unpacker.written


def store_upload(received: ReceivedFile, code_dir: Path, limits: UnpackLimits) -> int:
    """Check and unpack an upload, then rename it into place as `code_dir/<sha256>`; returns
    the bytes it unpacked to.

    The same bytes are unpacked again (and so checked) on every upload, then dropped when
    they are stored already; a .py sent under a new name is added beside the first.
    """
    final = code_dir / received.sha256
    staging = code_dir / f"{UNPACK_PREFIX}{uuid.uuid4().hex}"
    try:
        unpacked = unpack_upload(received, staging, limits)
        try:
            os.rename(staging, final)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not final.is_dir():
                raise
            if upload_kind(received.filename) == "python":
                _add_missing(staging / received.filename, final / received.filename)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return unpacked


def _add_missing(source: Path, target: Path) -> None:
    if not target.exists():
        os.replace(source, target)  # same filesystem: the file appears whole or not at all


# The artifact store's copy, from which workers with no shared disk fetch the code.


def keep_in_store(store: ArtifactStore, code_dir: Path, code_id: str) -> None:
    """Put the unpacked code in a remote store (as its canonical tar), unless it is there
    already; 503 when the store does not answer (the upload may be sent again)."""
    if not store.remote:
        return
    key = code_key(code_id)
    try:
        store.size(key)
        return
    except ObjectMissing:
        pass
    except StoreError as exc:
        raise _store_unavailable(exc) from None
    root = code_dir / code_id
    try:
        store.put(key, TreeDigest(root, scan_tree(root)).stream())
    except StoreError as exc:
        raise _store_unavailable(exc) from None


def drop_from_store(store: ArtifactStore, code_id: str) -> None:
    if store.remote:
        try:
            store.delete([code_key(code_id)])
        except StoreError:
            log.warning("code %s: could not delete its copy in the store", code_id)


def _store_unavailable(exc: StoreError) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"the artifact store did not answer; send the upload again: {exc}",
        detail={"store": "artifact"},
    )


# Rows: who uploaded what.


def record_upload(session: Session, received: ReceivedFile, owner: str, unpacked: int) -> bool:
    """Record that `owner` uploaded this code; False if they had already (and commit)."""
    session.add(
        CodeUpload(
            code_id=received.sha256,
            owner=owner,
            filename=received.filename,
            size=received.size,
            unpacked_size=unpacked,
        )
    )
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
        return False
    return True


def find_upload(session: Session, code_id: str, owner: str | None) -> CodeUpload | None:
    """An upload of `code_id` by `owner` (by anyone when `owner` is None)."""
    stmt = select(CodeUpload).where(CodeUpload.code_id == code_id)
    if owner is not None:
        stmt = stmt.where(CodeUpload.owner == owner)
    return session.exec(stmt).first()


def _bad_code_field(field: str, message: str) -> Unprocessable:
    detail = [{"loc": ["body", "code", field], "msg": message, "type": "value_error"}]
    return Unprocessable(f"invalid request: code.{field}: {message}", detail=detail)


def check_code_ref(session: Session, code_dir: Path, code: CodeRef, *, owner: str | None) -> None:
    """Refuse (422) a spec whose code was not uploaded by `owner` (anyone's, for None) or
    whose entrypoint is not a file inside it."""
    if find_upload(session, code.code_id, owner) is None or not (code_dir / code.code_id).is_dir():
        raise _bad_code_field(
            "code_id", f"no uploaded code {code.code_id}; upload it with POST /v1/code"
        )
    root = (code_dir / code.code_id).resolve()
    script = (root / code.entrypoint).resolve()
    if not script.is_relative_to(root) or not script.is_file():
        raise _bad_code_field(
            "entrypoint",
            f"{code.entrypoint!r} is not a file in the uploaded code {code.code_id}",
        )
