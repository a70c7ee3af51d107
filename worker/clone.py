"""Copying files the cheapest way the filesystem allows: a reflink (``FICLONE``: the copy shares
the source's blocks until one of them is written, on btrfs, XFS with reflink, bcachefs, ZFS with
block cloning), else an in-kernel copy (``copy_file_range``), else read and write.

A reflink is a copy in every way that matters here (writing one never changes the other) at
the cost of a few metadata writes; a hard link is not (the two names are one file: a program
truncating its own would truncate Launchbay's), so it is never used for a copy.

Every source is opened without following a link in its last component, and checked to be a
regular file (the worker may run as root; the job may have planted the link).
"""

import errno
import fcntl
import os
import shutil
import stat
from pathlib import Path

FICLONE = 0x40049409  # _IOW(0x94, 9, int), linux/fs.h
# Errors that mean "no reflink here" (another filesystem, or one without them).
NO_REFLINK = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM}
COPY_CHUNK = 1 << 24


def reflink(src_fd: int, dst_fd: int) -> bool:
    """Make `dst_fd` (an empty file) a reflink of `src_fd`; False where the filesystem cannot."""
    try:
        fcntl.ioctl(dst_fd, FICLONE, src_fd)
        return True
    except OSError as exc:
        if exc.errno in NO_REFLINK:
            return False
        raise


def copy_fd(src_fd: int, dst_fd: int, size: int) -> None:
    """Copy `size` bytes from the start of `src_fd` to `dst_fd`, in the kernel where it can."""
    offset = 0
    try:
        while offset < size:
            done = os.copy_file_range(src_fd, dst_fd, min(COPY_CHUNK, size - offset), offset)
            if done == 0:
                raise OSError(errno.EIO, "the source got shorter while it was copied")
            offset += done
        return
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    os.lseek(src_fd, offset, os.SEEK_SET)
    os.lseek(dst_fd, offset, os.SEEK_SET)
    while offset < size:
        chunk = os.read(src_fd, min(COPY_CHUNK, size - offset))
        if not chunk:
            raise OSError(errno.EIO, "the source got shorter while it was copied")
        os.write(dst_fd, chunk)
        offset += len(chunk)


def open_source(path: Path) -> tuple[int, os.stat_result]:
    """`path` opened for reading, not through a link; OSError unless it is a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path.name} is not a regular file")
    return fd, st


def copy_file(src: Path, dst: Path, mode: int | None = None) -> bool:
    """Copy the regular file `src` to the new file `dst` (its mode: `mode`, else the source's
    permission bits); True when it is a reflink."""
    src_fd, st = open_source(src)
    try:
        perms = stat.S_IMODE(st.st_mode) & 0o777 if mode is None else mode
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        dst_fd = os.open(dst, flags, 0o600)
        try:
            cloned = reflink(src_fd, dst_fd)
            if not cloned:
                copy_fd(src_fd, dst_fd, st.st_size)
            os.fchmod(dst_fd, perms)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return cloned


def copy_tree(src: Path, dst: Path) -> int:
    """Copy the directory `src` as the new directory `dst`: its directories, regular files
    (reflinked where possible) and symbolic links (as links, never followed); anything else is
    left out. Returns the files copied."""
    copied = 0
    dst.mkdir(parents=True)
    for directory, dirs, files in os.walk(src, followlinks=False):
        rel = Path(directory).relative_to(src)
        for name in dirs + files:
            source, target = Path(directory, name), dst / rel / name
            st = source.lstat()
            if stat.S_ISLNK(st.st_mode):
                target.symlink_to(os.readlink(source))
            elif stat.S_ISDIR(st.st_mode):
                target.mkdir()
            elif stat.S_ISREG(st.st_mode):
                copy_file(source, target)
                copied += 1
    shutil.copymode(src, dst)
    return copied
