"""Register the checkpoints a job reports or declares, only once their files are proven
complete, keep Launchbay's own copy of each, and apply the spec's retention.

A checkpoint is reported by rank 0's ``checkpoint`` line (`add`: a path in the attempt's
checkpoint directory, ``LAUNCHBAY_CHECKPOINT_DIR``) or found by a declared output (`add_declared`:
a path in the working directory, `worker.outputs`). It is registered when it

- lies inside that directory (relative path, no ``..``, no symlink out of it),
- is a regular, non-empty file that no process holds open for writing, or a directory of
  regular files (no symlink, device...) (a reported one is taken as soon as its line is read,
  and a file still open for writing waits until it is closed, then is refused if it changed
  since the report),
- passes a format check where the format says where it ends (a torch.save zip needs its
  central directory, a safetensors file its declared length; each file of a directory),
- under a job user, is that user's own (every file of a directory too),
- has been copied whole into Launchbay's keeping (`worker.checkpoint_keep`, in the background
  thread of `worker.checkpoint_upload`): ``checkpoints/<job>/<path>`` for a reported one,
  ``checkpoints/<job>/work/<path>`` for a declared one, the row's `path` and the store's key,
  in the local store (the data dir) or a remote one, with the sha256 of the copy, and
- was still the same after that (so the copy is of one version of it).

Registered means kept: the copy is the worker's, and nothing the program does to its own files
afterwards (rotation, overwriting in place, truncation, deletion) changes what is downloaded.

Retention keeps the last `keep_last` checkpoints of the job (every attempt) plus the best by
`best_metric` (every one while no checkpoint reports that metric); rows are retired first
(kept, marked deleted, with a `checkpoint_deleted` event), then the copies deleted (in the
store, and the worker's own), so no live row ever points at a deleted file. A retired
checkpoint that this attempt reported from its checkpoint directory is deleted there too while
it is still the file that was registered; a program's files in its working directory are its
own, never deleted.
"""

import logging
import os
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.contract.data_dir import DataLayout
from jobs.states import AttemptRef
from service.artifacts import ArtifactStore, LocalStore, StoreError, store_for
from service.artifacts.tree import TreeRefused
from service.db import session_scope
from service.models import Checkpoint
from service.records import (
    AttemptSuperseded,
    delete_checkpoints,
    list_checkpoints,
    register_checkpoint,
    retired_paths,
)
from service.settings import Settings
from worker.checkpoint_checks import (
    CheckpointRejected,
    FileSignature,
    Signature,
    check_complete,
    open_for_writing,
    remove_unchanged,
    resolve_checkpoint,
    signature,
)
from worker.checkpoint_keep import KeepPlace
from worker.checkpoint_upload import CheckpointUploader, Pace, Stored, UploadRefused
from worker.events import CheckpointEvent
from worker.launch import RunPaths

log = logging.getLogger(__name__)

# Where a declared output's kept copy goes: ``checkpoints/<job>/work/<path>``.
WORK_KEY = "work"


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
    key: str = ""
    # Reported from the attempt's checkpoint directory (deleted there when retention retires it).
    reported: bool = True
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
        work_dir: Path | None = None,
        kept_dir: Path | None = None,
        job_uid: int | None = None,
    ) -> None:
        """`upload_bytes_per_s` bounds reading checkpoints until the final poll (0: none).
        `work_dir` is where declared outputs are; `kept_dir` where the copies are kept
        (default ``checkpoints/<job>``; a `checkpoint_dir` that is `kept_dir` itself is kept in
        place, as before); `job_uid`, the job user whose files alone may be kept."""
        self.engine = engine
        self.job_id, self.attempt = ref.job_id, ref.attempt
        self.data_dir = data_dir.resolve()
        self.checkpoint_dir = checkpoint_dir
        self.work_dir = work_dir
        kept_dir = kept_dir or DataLayout(self.data_dir).kept_checkpoints(ref.job_id)
        self.kept_dir = kept_dir.resolve()
        self.policy = policy
        self.pending: dict[Path, _Pending] = {}
        self.store: ArtifactStore = store or LocalStore(data_dir)
        self.uploader = CheckpointUploader(
            self.store, retry_for_s=upload_retry_s, pace=Pace(upload_bytes_per_s)
        )
        in_place = checkpoint_dir.resolve() == self.kept_dir
        group = None if job_uid is None else self.data_dir.stat().st_gid
        self.keep = None if in_place else KeepPlace(self.kept_dir, self.data_dir, job_uid, group)
        # What this attempt registered from its checkpoint directory: key -> (file, signature).
        self.sources: dict[str, tuple[Path, Signature]] = {}
        self.registered = 0
        self.rejected = 0
        # The job is no longer this attempt's: nothing more is registered.
        self.superseded = False
        # Whether this attempt's retention has removed what earlier passes retired.
        self.swept = False
        # Told of each checkpoint once it is registered (the attempt's goodput marks).
        self.on_registered: Callable[[CheckpointEvent], None] | None = None

    @classmethod
    def for_attempt(
        cls,
        engine: Engine,
        settings: Settings,
        ref: AttemptRef,
        paths: RunPaths,
        job_uid: int | None,
        policy: CheckpointPolicy,
    ) -> "CheckpointRegistrar":
        """An attempt's registrar: what its ranks report or declare, kept in the job's
        checkpoints (the job user's own files only)."""
        return cls(
            engine,
            ref,
            data_dir=paths.data_dir,
            checkpoint_dir=paths.checkpoint_dir,
            policy=policy,
            store=store_for(settings),
            upload_retry_s=settings.checkpoint_upload_retry_s,
            upload_bytes_per_s=settings.checkpoint_upload_bytes_per_s,
            work_dir=paths.work_dir,
            kept_dir=paths.kept_dir,
            job_uid=job_uid,
        )

    def _reject(self, reported: str, reason: object) -> None:
        self.rejected += 1
        log.warning("job %s: checkpoint %r not registered: %s", self.job_id, reported, reason)

    def add(self, event: CheckpointEvent) -> None:
        """A reported checkpoint, sent to the store at once when its file is closed (a later
        report of the same file replaces an earlier one still waiting)."""
        self._add(event, self.checkpoint_dir, None)

    def add_declared(self, rel: str, step: int | None) -> None:
        """A declared output of the working directory, found complete and settled."""
        if self.work_dir is None:
            raise ValueError("declared outputs need the working directory")
        self._add(CheckpointEvent(path=rel, step=step, epoch=None), self.work_dir, WORK_KEY)

    def _add(self, event: CheckpointEvent, root: Path, prefix: str | None) -> None:
        try:
            path = resolve_checkpoint(root, event.path)
            rel = path.relative_to(root.resolve()).as_posix()
            kept = self.kept_dir if prefix is None else self.kept_dir / prefix
            key = (kept / rel).relative_to(self.data_dir).as_posix()
            pending = _Pending(event, path, signature(path), key, reported=prefix is None)
            self.pending[path] = pending
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
                    pending.key,
                    path,
                    partial(self._check_unchanged, pending),
                    signed.inode if isinstance(signed, FileSignature) else None,
                    self.keep,
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
        if self.on_registered is not None:
            self.on_registered(pending.event)
        if pending.reported and self.keep is not None:
            self.sources[pending.key] = (path, pending.signature)
        self._apply_retention()
        return True

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
                path=pending.key,
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
                # A pass retires its rows, commits, then removes the files: one cut off in
                # between (its host lost, the store down) left files no row lists. The first
                # pass of each attempt removes them again.
                earlier = set() if self.swept else retired_paths(session, self.job_id)
        except AttemptSuperseded:
            log.warning(
                "job %s: attempt %d superseded; retention skipped", self.job_id, self.attempt
            )
            return
        except SQLAlchemyError:
            log.warning("job %s: checkpoint retention failed", self.job_id, exc_info=True)
            return
        kept_paths = {c.path for c in rows if c.id in keep}
        doomed = sorted(({c.path for c in dropped} | earlier) - kept_paths)
        if self.store.remote and doomed:
            try:
                self.store.delete(doomed)
                self.swept = True
            except StoreError:
                log.warning("job %s: could not delete %s from the store", self.job_id, doomed)
        else:
            self.swept = True
        for path in doomed:
            local = self.data_dir / path
            if not local.resolve().is_relative_to(self.kept_dir):
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
        self._remove_sources(doomed)

    def _remove_sources(self, doomed: list[str]) -> None:
        """The files this attempt reported, for checkpoints retention retired, while they are
        still what was registered (the program writes its checkpoint directory as it likes)."""
        for key in doomed:
            source = self.sources.pop(key, None)
            if source is None:
                continue
            try:
                remove_unchanged(self.checkpoint_dir.resolve(), *source)
            except OSError:
                log.warning("job %s: could not delete %s", self.job_id, source[0], exc_info=True)
