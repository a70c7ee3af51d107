"""Register the checkpoints rank 0 reports, only once their files are proven complete, and
apply the spec's retention.

A reported file (or directory) is registered when it

- lies inside the job's checkpoint directory (relative path, no ``..``, no symlink out of it),
- is a regular, non-empty file that no process holds open for writing, or a directory of
  regular files (no symlink, device...) (the contract says it is complete before its line is
  written: it is taken as soon as its line is read, and a file still open for writing waits
  until it is closed, then is refused if it changed since the report),
- passes a format check where the format says where it ends (a torch.save zip needs its
  central directory, a safetensors file its declared length; each file of a directory),
- is whole in the artifact store: the uploader (worker/checkpoint_upload.py) stores it in the
  background, computing its sha256 as it streams (a directory's: of its canonical tar
  stream, service/artifacts/tree.py), and the monitor loop registers it once that is done, and
- is still the same after that.

Retention keeps the last `keep_last` checkpoints of the job (every attempt) plus the best by
`best_metric` (every one while no checkpoint reports that metric); rows are retired first
(kept, marked deleted, with a `checkpoint_deleted` event), then files deleted (in the store,
and the worker's own copy), so no live row ever points at a deleted file.
"""

import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import zipfile
from collections.abc import Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.states import AttemptRef
from service.artifacts import ArtifactStore, LocalStore, StoreError
from service.artifacts.tree import TreeFile, TreeRefused, scan_tree
from service.db import session_scope
from service.models import Checkpoint
from service.store import (
    AttemptSuperseded,
    delete_checkpoints,
    list_checkpoints,
    register_checkpoint,
)
from worker.checkpoint_upload import CheckpointUploader, Pace, Stored, UploadRefused
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
    if not real.is_file() and not real.is_dir():
        raise CheckpointRejected(f"{reported!r} is not a regular file or a directory")
    return real


# A directory's signature: its files (path, size, mtime, inode), in canonical order.
Signature = FileSignature | tuple[TreeFile, ...]


def signature(path: Path) -> Signature:
    if path.is_dir() and not path.is_symlink():
        try:
            return tuple(scan_tree(path))
        except (TreeRefused, OSError) as exc:
            raise CheckpointRejected(f"{path.name}: {exc}") from None
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
    """Refuse a file whose own format shows it was cut short (each file of a directory)."""
    if path.is_dir():
        for file in scan_tree(path):
            check_complete(path / file.path, file.size)
        return
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
            if header_len > size - 8:  # read no more than the file holds
                raise ValueError(f"a {header_len}-byte header in a {size}-byte file")
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
    such a file. False for a directory, and where leases are not available (another
    filesystem, no right to one)."""
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
    """Ids to keep: the last `keep_last` by seq, plus the best (`CheckpointPolicy.best`); all
    of them while the policy's `best_metric` is one no checkpoint reports (a name mistyped, or
    not reported yet): which one is the best is not known, so none goes for not being it."""
    ordered = sorted(checkpoints, key=lambda c: c.seq)
    keep = {c.id for c in ordered[-policy.keep_last :]}
    best = policy.best(ordered, metrics=lambda c: c.metrics, seq=lambda c: c.seq)
    if best is not None:
        keep.add(best.id)
    elif policy.best_metric:
        keep.update(c.id for c in ordered)
    return keep


@dataclass
class _Pending:
    event: CheckpointEvent
    path: Path
    signature: Signature
    upload: "Future[Stored] | None" = None


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
        store: ArtifactStore | None = None,
        upload_retry_s: float = 300.0,
        upload_bytes_per_s: int = 0,
    ) -> None:
        """`upload_bytes_per_s` bounds reading checkpoints until the final poll (0: none)."""
        self.engine = engine
        self.job_id, self.attempt = ref.job_id, ref.attempt
        self.data_dir = data_dir.resolve()
        self.checkpoint_dir = checkpoint_dir
        self.policy = policy
        self.pending: dict[Path, _Pending] = {}
        self.store: ArtifactStore = store or LocalStore(data_dir)
        self.uploader = CheckpointUploader(
            self.store, retry_for_s=upload_retry_s, pace=Pace(upload_bytes_per_s)
        )
        self.registered = 0
        self.rejected = 0
        # The job is no longer this attempt's: nothing more is registered.
        self.superseded = False

    def _reject(self, reported: str, reason: object) -> None:
        self.rejected += 1
        log.warning("job %s: checkpoint %r not registered: %s", self.job_id, reported, reason)

    def add(self, event: CheckpointEvent) -> None:
        """A reported checkpoint, sent to the store at once when its file is closed (a later
        report of the same file replaces an earlier one still waiting)."""
        try:
            path = resolve_checkpoint(self.checkpoint_dir, event.path)
            self.pending[path] = _Pending(event, path, signature(path))
        except CheckpointRejected as exc:
            self._reject(event.path, exc)
            return
        self.poll(only=path)

    def poll(self, *, final: bool = False, only: Path | None = None) -> None:
        """Send what is no longer open for writing to the store (`only` that one), register
        what is whole there; with `final` (no rank is left to write) check everything and wait
        for the uploads."""
        if self.superseded:
            return
        for path, pending in list(self.pending.items()):
            if only is not None and path != only:
                continue
            if pending.upload is None and (final or not open_for_writing(path)):
                try:
                    self._verify(pending)
                except CheckpointRejected as exc:
                    del self.pending[path]
                    self._reject(pending.event.path, exc)
                    continue
                except OSError as exc:
                    del self.pending[path]
                    self._reject(pending.event.path, f"cannot be read: {exc}")
                    continue
                signed = pending.signature
                pending.upload = self.uploader.submit(
                    self._key(pending),
                    path,
                    partial(self._check_unchanged, pending),
                    signed.inode if isinstance(signed, FileSignature) else None,
                )
        if final:
            self.uploader.pace.lift()  # no rank is left to slow down
            wait([p.upload for p in self.pending.values() if p.upload is not None])
        for path, pending in list(self.pending.items()):
            if pending.upload is None or not pending.upload.done():
                continue
            if not self._register_stored(path, pending):
                return

    def _register_stored(self, path: Path, pending: _Pending) -> bool:
        """Register a finished upload; False when the attempt was superseded."""
        assert pending.upload is not None
        try:
            stored = pending.upload.result()
        except (CheckpointRejected, UploadRefused, StoreError, OSError) as exc:
            del self.pending[path]
            self._reject(pending.event.path, exc)
            return True
        try:
            self._register(pending, stored)
        except AttemptSuperseded:
            log.warning(
                "job %s: attempt %d superseded; checkpoints dropped", self.job_id, self.attempt
            )
            self.superseded = True
            self.pending.clear()
            self.uploader.close(wait=False)
            return False
        except SQLAlchemyError:
            log.warning("job %s: registering a checkpoint failed; retrying", self.job_id)
            return True
        del self.pending[path]
        self.registered += 1
        self._apply_retention()
        return True

    def _key(self, pending: _Pending) -> str:
        return pending.path.relative_to(self.data_dir).as_posix()

    def _check_unchanged(self, pending: _Pending) -> None:
        if signature(pending.path) != pending.signature:
            raise CheckpointRejected("it changed while it was stored (still being written)")

    def _verify(self, pending: _Pending) -> None:
        path = pending.path
        if signature(path) != pending.signature:
            raise CheckpointRejected("it changed after it was reported (still being written)")
        size = pending.signature.size if isinstance(pending.signature, FileSignature) else 0
        try:
            check_complete(path, size)
        except TreeRefused as exc:
            raise CheckpointRejected(str(exc)) from None

    def _register(self, pending: _Pending, stored: Stored) -> None:
        event = pending.event
        with session_scope(self.engine) as session:
            register_checkpoint(
                session,
                self.job_id,
                self.attempt,
                path=self._key(pending),
                step=event.step,
                epoch=event.epoch,
                metrics=event.metrics,
                size=stored.size,
                sha256=stored.sha256,
                kind=stored.kind,
                files=stored.files,
                manifest=stored.manifest,
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
        doomed = [c.path for c in dropped if c.path not in kept_paths]
        if self.store.remote and doomed:
            try:
                self.store.delete(doomed)
            except StoreError:
                log.warning("job %s: could not delete %s from the store", self.job_id, doomed)
        base = self.checkpoint_dir.resolve()
        for path in doomed:
            local = self.data_dir / path
            if not local.resolve().is_relative_to(base):
                continue
            try:
                if local.is_dir() and not local.is_symlink():
                    shutil.rmtree(local)
                else:
                    os.unlink(local)
            except FileNotFoundError:
                pass
            except OSError:
                log.warning("job %s: could not delete %s", self.job_id, local, exc_info=True)
