"""Putting a verified checkpoint in the artifact store, beside training rather than in its way.

`CheckpointUploader.submit` hands a checkpoint (a file, or a directory as its canonical tar
stream, service/artifacts/tree.py) to one background thread, which streams it to the store
while computing its sha256 and returns what the registry records (`Stored`). The monitor loop
only looks at the finished futures, so a slow upload never holds the loop, nor the ranks.

- With a `KeepPlace` (the worker's registrar gives one) the thread first takes Launchbay's own
  copy of the checkpoint (`worker.checkpoint_keep`: a reflink where the filesystem has them,
  else a copy made while hashing), checks that the source did not change meanwhile, and only
  then publishes the copy: renamed into place in the data dir (the local store's object; with a
  remote one, the worker's own copy, once it is sent from there: a program overwriting its file
  during an upload can never tear what is stored). Without one (a checkpoint already in its
  kept place) the local store only hashes it and a remote one is sent the file itself.
- A failed upload (the store unreachable, or gone mid-upload) is retried with backoff until
  `retry_for_s` has passed; an object store makes an object visible only once complete, so
  nothing half-written is ever listed, served or registered.
- The thread runs in ``SCHED_BATCH`` at nice 10 (`worker.cpu_policy.run_in_batches`), and so
  do the threads it starts (the store client's): reading, hashing and sending a large
  checkpoint never pre-empt a rank and yield to the supervisor's own work, yet cannot be
  starved by ranks that use every core.
- While the ranks may still train, the thread reads at most `bytes_per_s` (`Pace`, the
  setting `LAUNCHBAY_CHECKPOINT_UPLOAD_BYTES_PER_S`): on a host whose cores the ranks keep
  busy, reading and hashing a checkpoint at full speed slows a rank on a neighbouring core
  through the memory traffic alone (docs/benchmarks.md, P9c). Once no rank is left (the
  registrar's final poll) the pace is lifted and the rest goes at full speed.
- After the copy (or the upload, without a `KeepPlace`) the source is looked at again: a file
  (or tree) that changed meanwhile was still being written, and is refused
  (`CheckpointRejected`).
"""

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from service.artifacts import ArtifactStore, LocalStore, StoreError
from service.artifacts.tree import CHUNK, TreeDigest, TreeFile, TreeRefused, open_regular, scan_tree
from worker.checkpoint_keep import (
    KeepPlace,
    KeepRefused,
    Snapshot,
    publish_local,
    snapshot_file,
    snapshot_tree,
)
from worker.cpu_policy import run_in_batches

log = logging.getLogger(__name__)
TAR_MEDIA_TYPE = "application/x-tar"


class Pace:
    """A bound on the bytes a second that checkpoint reads may take, until `lift()`; None: no
    bound. Shared by every upload of one attempt."""

    def __init__(self, bytes_per_s: float | None = None) -> None:
        self.bytes_per_s = bytes_per_s
        self._lifted = threading.Event()
        if not bytes_per_s:
            self._lifted.set()

    def lift(self) -> None:
        """From now on every read goes at full speed (a read waiting for its turn goes at once)."""
        self._lifted.set()

    @property
    def lifted(self) -> bool:
        return self._lifted.is_set()

    def chunks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """`chunks`, each next one asked for no sooner than the bound allows."""
        began, taken = time.monotonic(), 0
        for chunk in chunks:
            yield chunk
            taken += len(chunk)
            if self.bytes_per_s and not self._lifted.is_set():
                ahead = taken / self.bytes_per_s - (time.monotonic() - began)
                if ahead > 0:
                    self._lifted.wait(ahead)


class UploadRefused(Exception):
    """The checkpoint cannot be stored as it is (the message says why); not retried."""


@dataclass(frozen=True)
class Stored:
    """What the registry records of a checkpoint that is whole in the store."""

    size: int
    sha256: str
    kind: str = "file"
    files: int = 1
    manifest: list[dict[str, Any]] | None = None


def read_chunks(path: Path, size: int, inode: int | None = None) -> Iterator[bytes]:
    """The file's bytes, refused if it is no longer the regular file that was reported (the
    worker may run as root: a link swapped in must not be followed)."""
    try:
        handle = open_regular(path, size, inode)
    except TreeRefused as exc:
        raise UploadRefused(str(exc)) from None
    with handle:
        left = size
        while left > 0:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                raise UploadRefused(f"{path.name} got shorter while it was read")
            left -= len(chunk)
            yield chunk


NO_PACE = Pace()


def store_file(
    store: ArtifactStore,
    key: str,
    path: Path,
    size: int,
    inode: int | None = None,
    pace: Pace = NO_PACE,
) -> Stored:
    chunks = pace.chunks(read_chunks(path, size, inode))
    if store.remote:
        stored = store.put(key, chunks)
        return Stored(stored.size, stored.sha256)
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return Stored(size, digest.hexdigest())


def store_tree(
    store: ArtifactStore, key: str, root: Path, files: list[TreeFile], pace: Pace = NO_PACE
) -> Stored:
    tree = TreeDigest(root, files)
    try:
        if store.remote:
            store.put(key, pace.chunks(tree.stream()), content_type=TAR_MEDIA_TYPE)
        else:
            for _ in pace.chunks(tree.stream()):
                pass
    except TreeRefused as exc:
        raise UploadRefused(str(exc)) from None
    manifest = [entry.as_dict() for entry in tree.manifest]
    return Stored(tree.size, tree.sha256, kind="dir", files=len(files), manifest=manifest)


def tree_files(root: Path) -> list[TreeFile]:
    try:
        return scan_tree(root)
    except TreeRefused as exc:
        raise UploadRefused(str(exc)) from None


UPLOAD_NICENESS = 10


def _lower_priority() -> None:
    run_in_batches()  # where it cannot (not Linux), the thread keeps the process's policy
    try:  # on Linux, this thread's own (and inherited by the threads it starts)
        os.setpriority(os.PRIO_PROCESS, 0, UPLOAD_NICENESS)
    except OSError:
        log.debug("cannot lower the upload thread's priority", exc_info=True)


class CheckpointUploader:
    """One background thread that stores checkpoints, one at a time, in submission order."""

    def __init__(
        self,
        store: ArtifactStore,
        *,
        retry_for_s: float = 300.0,
        first_backoff_s: float = 0.5,
        pace: Pace = NO_PACE,
    ) -> None:
        self.store = store
        self.pace = pace
        self.retry_for_s = retry_for_s
        self.first_backoff_s = first_backoff_s
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="checkpoint-upload", initializer=_lower_priority
        )
        self._closing = False

    def submit(
        self,
        key: str,
        path: Path,
        unchanged: Callable[[], None],
        inode: int | None = None,
        keep: KeepPlace | None = None,
    ) -> "Future[Stored]":
        """Store the file or directory `path` under `key`; `unchanged()` (raising when the
        source changed since it was reported) is called once the bytes are taken. A file must
        still be `inode` (the one reported), a directory's files the ones listed. With `keep`,
        what is stored is a copy made there first (see the module docstring)."""
        if keep is None:
            return self._pool.submit(self._store, key, path, unchanged, inode)
        return self._pool.submit(self._keep, key, path, unchanged, inode, keep)

    def _retrying(self, key: str, put: Callable[[], Stored]) -> Stored:
        deadline = time.monotonic() + self.retry_for_s
        backoff = self.first_backoff_s
        while True:
            try:
                return put()
            except StoreError as exc:
                if self._closing or time.monotonic() + backoff > deadline:
                    raise
                log.warning("storing %s failed (%s); trying again in %.1f s", key, exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _store(
        self, key: str, path: Path, unchanged: Callable[[], None], inode: int | None
    ) -> Stored:
        def put() -> Stored:
            if path.is_dir():
                stored = store_tree(self.store, key, path, tree_files(path), self.pace)
            else:
                size = path.stat().st_size
                stored = store_file(self.store, key, path, size, inode, self.pace)
            unchanged()
            return stored

        return self._retrying(key, put)

    def _keep(
        self,
        key: str,
        path: Path,
        unchanged: Callable[[], None],
        inode: int | None,
        keep: KeepPlace,
    ) -> Stored:
        try:
            if path.is_dir():
                snapshot = snapshot_tree(path, tree_files(path), keep, self.pace.chunks)
            else:
                snapshot = snapshot_file(path, path.stat().st_size, inode, keep, self.pace.chunks)
        except KeepRefused as exc:
            raise UploadRefused(str(exc)) from None
        try:
            unchanged()
            stored = Stored(
                snapshot.size, snapshot.sha256, snapshot.kind, snapshot.files, snapshot.manifest
            )
            if not isinstance(self.store, LocalStore):
                self._retrying(key, partial(self._send_snapshot, key, snapshot, stored))
            # With a remote store, the worker's own copy: a retry here resumes without a fetch.
            publish_local(snapshot, keep.root / key)
            return stored
        finally:
            snapshot.discard()

    def _send_snapshot(self, key: str, snapshot: Snapshot, stored: Stored) -> Stored:
        if snapshot.kind == "dir":
            sent = store_tree(self.store, key, snapshot.path, tree_files(snapshot.path), self.pace)
        else:
            sent = store_file(self.store, key, snapshot.path, snapshot.size, None, self.pace)
        if sent.sha256 != stored.sha256:
            raise UploadRefused(f"{key}: the copy changed while it was sent")
        return stored

    def close(self, wait: bool = True) -> None:
        """Stop taking work; with `wait`, finish what was submitted (retries included), at
        full speed."""
        self.pace.lift()
        if not wait:
            self._closing = True
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
