"""The artifact store's interface: where checkpoints and uploaded code are kept, by key.

A key is a relative POSIX path (`checkpoints/<job>/<name>`, `code/<sha256>.tar`), the same in
every store, and the same string the database rows hold, so rows never change when the store
does. An object appears whole or not at all: `put` either completes (then `head` sees it) or
leaves nothing that `head`, `get` or a listing would find.

    StoreError                 the store could not do it (retry later)
    └── ObjectMissing          no object under that key
"""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


class StoreError(Exception):
    """The store failed or could not be reached; the operation may succeed later."""


class ObjectMissing(StoreError):
    """No object under the key."""


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    sha256: str  # of the bytes sent, computed while they streamed


class ArtifactStore(ABC):
    """Objects by key. `remote` stores hold copies; the local one is the data dir itself, so
    a file already in place there needs no upload."""

    name: str
    remote: bool

    @abstractmethod
    def put(
        self, key: str, chunks: Iterable[bytes], content_type: str | None = None
    ) -> StoredObject:
        """Store the bytes `chunks` yields under `key`, replacing any object there; a remote
        store serves it with `content_type`."""

    @abstractmethod
    def size(self, key: str) -> int:
        """The object's length; ObjectMissing when there is none."""

    @abstractmethod
    def get(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Bytes `start` to `end` (exclusive; None: to the end) of the object, streamed."""

    @abstractmethod
    def delete(self, keys: Iterable[str]) -> None:
        """Remove the objects (a missing one is no error)."""

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Remove every object whose key starts with `prefix` + "/"."""

    def presign_get(self, key: str, expires_s: int) -> str | None:
        """A URL anyone holding it may GET the object from for `expires_s`; None when the
        store has no such URLs."""
        return None

    def get_to_file(self, key: str, target: Path) -> StoredObject:
        """Copy the object into `target` (through `target`.part, renamed when complete)."""
        import hashlib

        part = target.with_name(f".{target.name}.part")
        digest = hashlib.sha256()
        size = 0
        try:
            with open(part, "wb") as handle:
                for chunk in self.get(key):
                    handle.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
            part.rename(target)
        finally:
            part.unlink(missing_ok=True)
        return StoredObject(key, size, digest.hexdigest())
