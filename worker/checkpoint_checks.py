"""The checks a reported checkpoint passes before it is kept (`worker.checkpoints`): where it
is, what it is, whether it is complete, and whether something still writes it."""

import errno
import fcntl
import json
import os
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from service.artifacts.tree import TreeFile, TreeRefused, scan_tree

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


DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_unchanged(root: Path, path: Path, signed: Signature) -> bool:
    """Delete `path` (inside `root`, a directory the job writes) if it is still what `signed`
    says; never through a link the job may have swapped in. Whether it was deleted."""
    *parents, name = path.relative_to(root).parts
    fd = os.open(root, DIRECTORY)
    try:
        for part in parents:
            inner = os.open(part, DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if isinstance(signed, FileSignature):
            now = FileSignature(st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
            if not stat.S_ISREG(st.st_mode) or now != signed:
                return False
            os.unlink(name, dir_fd=fd)
            return True
        if not stat.S_ISDIR(st.st_mode):
            return False
        try:
            if tuple(scan_tree(Path(f"/proc/self/fd/{fd}") / name)) != signed:
                return False
        except TreeRefused:
            return False
        shutil.rmtree(name, dir_fd=fd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
