"""Where a downloaded artifact goes: `DEST/<its path>`, and never outside DEST.

An artifact's path comes from the API (its listing, or the PATH a person asked for), so it is
checked here whatever the server says: an absolute path, `..`, an empty or `.` part, or a NUL
is refused, and so is a directory on the way that is a symbolic link (an existing
`DEST/logs -> /etc` would otherwise redirect the write). The bytes land in a temporary file
beside the target and are renamed onto it, which replaces a link at the target itself rather
than writing through it.
"""

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from client.errors import LaunchbayClientError
from client.models import Artifact


class UnsafeArtifactPath(LaunchbayClientError):
    """An artifact's path that would be written outside the destination directory."""

    def __init__(self, path: str, dest: Path, why: str) -> None:
        super().__init__(f"refusing to write artifact {path!r} outside {dest}: {why}")
        self.path = path


def chosen(items: list[Artifact], path: str | None) -> list[Artifact]:
    """The listed artifacts that `path` names: all for None, else that file or those under
    that directory."""
    if path is None:
        return list(items)
    prefix = path.strip("/") + "/"
    return [item for item in items if item.path == path or item.path.startswith(prefix)]


def target_in(dest: Path, path: str) -> Path:
    """`dest/path`, checked: UnsafeArtifactPath when it could land outside `dest`."""
    parts = path.split("/")
    if path.startswith("/") or "\x00" in path:
        raise UnsafeArtifactPath(path, dest, "an absolute path")
    if any(part in ("", ".", "..") for part in parts):
        raise UnsafeArtifactPath(path, dest, "an empty, '.' or '..' part")
    here = dest
    for part in parts[:-1]:
        here = here / part
        if here.is_symlink():
            raise UnsafeArtifactPath(path, dest, f"{here} is a symbolic link")
        if here.exists() and not here.is_dir():
            raise UnsafeArtifactPath(path, dest, f"{here} is not a directory")
    return dest / Path(*parts)


@contextmanager
def written(dest: Path, path: str) -> Iterator[tuple[BinaryIO, Path]]:
    """A file to write the artifact `path` into, renamed onto `dest/path` when the block ends
    without an error (removed otherwise); yields it and the final path."""
    target = target_in(dest, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.parent.resolve().is_relative_to(dest.resolve()):
        raise UnsafeArtifactPath(path, dest, "its directory resolves elsewhere")
    handle, temporary = tempfile.mkstemp(prefix=".launchbay-", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            yield out, target
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
