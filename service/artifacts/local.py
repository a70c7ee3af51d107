"""The `local` artifact store: the data dir itself (the default, and the layout of before).

A key is a path under the data dir. What a worker writes there is in place already, so
nothing is uploaded; `put` writes beside the target and renames, so an object is whole or
absent.
"""

import hashlib
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath

from service.artifacts.base import ArtifactStore, ObjectMissing, StoredObject, StoreError

CHUNK = 1024 * 1024


class LocalStore(ArtifactStore):
    name = "local"
    remote = False

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def path_of(self, key: str) -> Path:
        rel = PurePosixPath(key)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ObjectMissing(f"no object {key!r}")
        return self.root / rel

    def put(
        self, key: str, chunks: Iterable[bytes], content_type: str | None = None
    ) -> StoredObject:
        target = self.path_of(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(f".{target.name}.{uuid.uuid4().hex}.part")
        digest, size = hashlib.sha256(), 0
        try:
            with open(part, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(part, target)
        except OSError as exc:
            raise StoreError(f"cannot write {key}: {exc}") from exc
        finally:
            part.unlink(missing_ok=True)
        return StoredObject(key, size, digest.hexdigest())

    def size(self, key: str) -> int:
        path = self.path_of(key)
        if not path.is_file():
            raise ObjectMissing(f"no object {key!r}")
        return path.stat().st_size

    def get(self, key: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        path = self.path_of(key)
        try:
            handle = open(path, "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectMissing(f"no object {key!r}") from None
        with handle:
            handle.seek(start)
            left = None if end is None else end - start
            while left is None or left > 0:
                chunk = handle.read(CHUNK if left is None else min(CHUNK, left))
                if not chunk:
                    return
                if left is not None:
                    left -= len(chunk)
                yield chunk

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            path = self.path_of(key)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> None:
        shutil.rmtree(self.path_of(prefix), ignore_errors=True)
