"""Registered means kept: the registrar stores its own copy of a checkpoint (worker/
checkpoint_keep.py), whatever the program does to its file afterwards or while it is sent."""

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from jobs.spec import CheckpointPolicy
from jobs.states import AttemptRef
from service.artifacts import ArtifactStore, ObjectMissing, StoredObject
from service.artifacts.tree import TreeDigest, scan_tree
from worker.checkpoint_keep import KeepPlace, KeepRefused, snapshot_file, snapshot_tree
from worker.checkpoint_upload import Stored
from worker.checkpoints import CheckpointRegistrar, _Pending
from worker.events import CheckpointEvent


def test_a_copy_stays_what_it_was_whatever_happens_to_its_source(tmp_path: Path) -> None:
    source = tmp_path / "job" / "model.pt"
    source.parent.mkdir()
    source.write_bytes(b"weights" * 1000)
    kept = tmp_path / "kept"
    kept.mkdir()
    st = source.stat()
    snapshot = snapshot_file(source, st.st_size, st.st_ino, KeepPlace(kept, tmp_path))
    assert snapshot.sha256 == hashlib.sha256(b"weights" * 1000).hexdigest()
    with open(source, "r+b") as handle:  # overwritten in place, then removed
        handle.write(b"garbage")
    source.unlink()
    assert hashlib.sha256(snapshot.path.read_bytes()).hexdigest() == snapshot.sha256
    assert snapshot.path.stat().st_ino != st.st_ino


def test_a_directory_copy_hashes_as_the_directory_streams(tmp_path: Path) -> None:
    source = tmp_path / "checkpoint-608"
    (source / "sub").mkdir(parents=True)
    (source / "model.safetensors").write_bytes(os.urandom(5000))
    (source / "sub" / "state.json").write_text('{"step": 608}')
    (tmp_path / "kept").mkdir()
    files = scan_tree(source)
    snapshot = snapshot_tree(source, files, KeepPlace(tmp_path / "kept", tmp_path))
    digest = TreeDigest(source, files)
    for _ in digest.stream():
        pass
    assert (snapshot.sha256, snapshot.size) == (digest.sha256, digest.size)
    assert snapshot.manifest == [entry.as_dict() for entry in digest.manifest]


def test_a_file_of_another_user_is_not_copied(tmp_path: Path) -> None:
    source = tmp_path / "model.pt"
    source.write_bytes(b"x")
    st = source.stat()
    with pytest.raises(KeepRefused, match="not the job's own"):
        snapshot_file(source, 1, st.st_ino, KeepPlace(tmp_path, tmp_path, job_uid=st.st_uid + 1))
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no copy left behind


class SlowRemoteStore(ArtifactStore):
    """A remote store during whose upload the program saves its checkpoint again, in place."""

    name, remote = "slow", True

    def __init__(self, source: Path) -> None:
        self.source = source
        self.objects: dict[str, bytes] = {}

    def put(
        self, key: str, chunks: Iterable[bytes], content_type: str | None = None
    ) -> StoredObject:
        data = b""
        for i, chunk in enumerate(chunks):
            if i == 0:
                self.source.write_bytes(b"the next save " * 1000)
            data += chunk
        self.objects[key] = data
        return StoredObject(key, len(data), hashlib.sha256(data).hexdigest())

    def size(self, key: str) -> int:
        if key not in self.objects:
            raise ObjectMissing(key)
        return len(self.objects[key])

    def get(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        yield self.objects[key][start:end]

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.objects.pop(key, None)

    def delete_prefix(self, prefix: str) -> None:
        pass


class Registrar(CheckpointRegistrar):
    def __init__(self, data_dir: Path, store: ArtifactStore) -> None:
        super().__init__(
            None,  # type: ignore[arg-type]  # the database writes are recorded instead
            AttemptRef("j", 1),
            data_dir=data_dir,
            checkpoint_dir=data_dir / "runs" / "j" / "attempt-1" / "checkpoints",
            policy=CheckpointPolicy(),
            store=store,
        )
        self.written: list[tuple[str, str]] = []

    def _register(self, pending: _Pending, stored: Stored) -> None:
        self.written.append((pending.key, stored.sha256))

    def _apply_retention(self) -> None:
        pass


def test_a_save_during_the_upload_never_tears_what_is_stored(tmp_path: Path) -> None:
    """The program saves again while its checkpoint is sent: what is stored and registered is
    the checkpoint as it was reported, sent from Launchbay's copy."""
    folder = tmp_path / "runs" / "j" / "attempt-1" / "checkpoints"
    folder.mkdir(parents=True)
    (tmp_path / "checkpoints" / "j").mkdir(parents=True)
    source = folder / "snapshot.pt"
    saved = b"the first save " * 1000
    source.write_bytes(saved)
    store = SlowRemoteStore(source)
    registrar = Registrar(tmp_path, store)
    registrar.add(CheckpointEvent(path="snapshot.pt", step=1, epoch=0))
    registrar.poll(final=True)
    key = "checkpoints/j/snapshot.pt"
    assert registrar.written == [(key, hashlib.sha256(saved).hexdigest())]
    assert store.objects[key] == saved
    assert (tmp_path / key).read_bytes() == saved  # the worker's own copy, for a retry here
