"""Register the checkpoints rank 0 reports, only once their files are proven complete, and
apply the spec's retention.

A reported file is registered when it

- lies inside the job's checkpoint directory (relative path, no ``..``, no symlink out of it),
- is a regular, non-empty file that no process holds open for writing (the contract says it
  is complete before its line is written: it is registered as soon as its line is read, and
  one still open for writing waits until it is closed, then is refused if it changed since
  the report),
- passes a format check where the format says where it ends (a torch.save zip needs its
  central directory, a safetensors file its declared length), and
- is still the same file after its sha256 was computed.

Retention keeps the last `keep_last` checkpoints of the job (every attempt) plus the best by
`best_metric`; rows are retired first (kept, marked deleted, with a `checkpoint_deleted`
event), then files deleted, so no live row ever points at a deleted file.
"""

import errno
import fcntl
import hashlib
import json
import logging
import os
import stat
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.states import AttemptRef
from service.db import session_scope
from service.models import Checkpoint
from service.store import (
    AttemptSuperseded,
    delete_checkpoints,
    list_checkpoints,
    register_checkpoint,
)
from worker.events import CheckpointEvent

log = logging.getLogger(__name__)

ZIP_MAGIC = b"PK\x03\x04"


class CheckpointRejected(Exception):
    """A reported checkpoint that is not registered (the reason is the message)."""


@dataclass(frozen=True)
class FileSignature:
    size: int
    mtime_ns: int
    inode: int
    device: int


def resolve_checkpoint(checkpoint_dir: Path, reported: str) -> Path:
    """The real file a reported `path` names, refused unless it is inside `checkpoint_dir`."""
    rel = PurePosixPath(reported.replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise CheckpointRejected(f"path {reported!r} must be relative and inside the directory")
    base = checkpoint_dir.resolve()
    try:
        real = (base / rel).resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise CheckpointRejected(f"{reported!r} does not exist") from None
    except (OSError, RuntimeError) as exc:
        raise CheckpointRejected(f"{reported!r} cannot be resolved: {exc}") from None
    if not real.is_relative_to(base) or real == base:
        raise CheckpointRejected(f"{reported!r} leads out of the checkpoint directory")
    if not real.is_file():
        raise CheckpointRejected(f"{reported!r} is not a regular file")
    return real


def signature(path: Path) -> FileSignature:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise CheckpointRejected(f"{path.name} disappeared") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointRejected(f"{path.name} is not a regular file")
    if st.st_size == 0:
        raise CheckpointRejected(f"{path.name} is empty")
    return FileSignature(st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def check_complete(path: Path, size: int) -> None:
    """Refuse a file whose own format shows it was cut short."""
    with open(path, "rb") as handle:
        head = handle.read(8)
    if head.startswith(ZIP_MAGIC):  # torch.save's default format
        try:
            with zipfile.ZipFile(path) as archive:
                entries = archive.infolist()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise CheckpointRejected(f"{path.name} is not a complete zip: {exc}") from None
        if not entries or any(e.header_offset + e.compress_size > size for e in entries):
            raise CheckpointRejected(f"{path.name} is a truncated zip")
    elif path.suffix == ".safetensors":
        try:
            header_len = int.from_bytes(head, "little")
            with open(path, "rb") as handle:
                handle.seek(8)
                header = json.loads(handle.read(header_len))
            ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        except (ValueError, KeyError, TypeError, IndexError, OSError) as exc:
            raise CheckpointRejected(
                f"{path.name} has no valid safetensors header: {exc}"
            ) from None
        if 8 + header_len + max(ends, default=0) != size:
            raise CheckpointRejected(f"{path.name} is not as long as its header says")


def open_for_writing(path: Path) -> bool:
    """Whether some process holds `path` open for writing: the kernel refuses a read lease on
    such a file. False where leases are not available (another filesystem, no right to one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False  # gone or unreadable: the checks that follow say so
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return False
    except OSError as exc:
        return exc.errno in (errno.EAGAIN, errno.EBUSY)
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def select_retained(checkpoints: Sequence[Checkpoint], policy: CheckpointPolicy) -> set[str]:
    """Ids to keep: the last `keep_last` by seq, plus the best (`CheckpointPolicy.best`)."""
    ordered = sorted(checkpoints, key=lambda c: c.seq)
    keep = {c.id for c in ordered[-policy.keep_last :]}
    best = policy.best(ordered, metrics=lambda c: c.metrics, seq=lambda c: c.seq)
    if best is not None:
        keep.add(best.id)
    return keep


@dataclass
class _Pending:
    event: CheckpointEvent
    path: Path
    signature: FileSignature


class CheckpointRegistrar:
    """Checkpoint reports waiting for their files to be proven complete, then registered."""

    def __init__(
        self,
        engine: Engine,
        ref: AttemptRef,
        *,
        data_dir: Path,
        checkpoint_dir: Path,
        policy: CheckpointPolicy,
    ) -> None:
        self.engine = engine
        self.job_id, self.attempt = ref.job_id, ref.attempt
        self.data_dir = data_dir.resolve()
        self.checkpoint_dir = checkpoint_dir
        self.policy = policy
        self.pending: dict[Path, _Pending] = {}
        self.registered = 0
        self.rejected = 0
        # The job is no longer this attempt's: nothing more is registered.
        self.superseded = False

    def _reject(self, reported: str, reason: object) -> None:
        self.rejected += 1
        log.warning("job %s: checkpoint %r not registered: %s", self.job_id, reported, reason)

    def add(self, event: CheckpointEvent) -> None:
        """A reported checkpoint, registered at once when its file is closed (a later report of
        the same file replaces an earlier one still waiting)."""
        try:
            path = resolve_checkpoint(self.checkpoint_dir, event.path)
            self.pending[path] = _Pending(event, path, signature(path))
        except CheckpointRejected as exc:
            self._reject(event.path, exc)
            return
        self.poll(only=path)

    def poll(self, *, final: bool = False, only: Path | None = None) -> None:
        """Register what is no longer open for writing (`only` that one); with `final` (no
        rank is left to write) check everything."""
        if self.superseded:
            return
        for path, pending in list(self.pending.items()):
            if only is not None and path != only:
                continue
            if not final and open_for_writing(path):
                continue
            try:
                digest = self._verify(pending)
            except CheckpointRejected as exc:
                del self.pending[path]
                self._reject(pending.event.path, exc)
                continue
            except OSError as exc:
                del self.pending[path]
                self._reject(pending.event.path, f"cannot be read: {exc}")
                continue
            try:
                self._register(pending, digest)
            except AttemptSuperseded:
                log.warning(
                    "job %s: attempt %d superseded; checkpoints dropped", self.job_id, self.attempt
                )
                self.superseded = True
                self.pending.clear()
                return
            except SQLAlchemyError:
                log.warning("job %s: registering a checkpoint failed; retrying", self.job_id)
                continue
            del self.pending[path]
            self.registered += 1
            self._apply_retention()

    def _verify(self, pending: _Pending) -> str:
        path = pending.path
        if signature(path) != pending.signature:
            raise CheckpointRejected("the file changed after it was reported (still being written)")
        check_complete(path, pending.signature.size)
        digest = sha256_file(path)
        if signature(path) != pending.signature:
            raise CheckpointRejected("the file changed while its checksum was computed")
        return digest

    def _register(self, pending: _Pending, digest: str) -> None:
        event = pending.event
        with session_scope(self.engine) as session:
            register_checkpoint(
                session,
                self.job_id,
                self.attempt,
                path=pending.path.relative_to(self.data_dir).as_posix(),
                step=event.step,
                epoch=event.epoch,
                metrics=event.metrics,
                size=pending.signature.size,
                sha256=digest,
            )

    def _apply_retention(self) -> None:
        try:
            with session_scope(self.engine) as session:
                rows = list_checkpoints(session, self.job_id)
                keep = select_retained(rows, self.policy)
                dropped = delete_checkpoints(
                    session, self.job_id, self.attempt, [c.id for c in rows if c.id not in keep]
                )
        except AttemptSuperseded:
            log.warning(
                "job %s: attempt %d superseded; retention skipped", self.job_id, self.attempt
            )
            return
        except SQLAlchemyError:
            log.warning("job %s: checkpoint retention failed", self.job_id, exc_info=True)
            return
        kept_paths = {c.path for c in rows if c.id in keep}
        base = self.checkpoint_dir.resolve()
        for checkpoint in dropped:
            file = self.data_dir / checkpoint.path
            if checkpoint.path in kept_paths or not file.resolve().is_relative_to(base):
                continue
            try:
                os.unlink(file)
            except FileNotFoundError:
                pass
            except OSError:
                log.warning("job %s: could not delete %s", self.job_id, file, exc_info=True)
