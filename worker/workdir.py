"""An attempt's working directory: a writable copy of the job's code (empty for a recipe), where
its ranks start (``runs/<job>/attempt-<n>[/node-<k>]/work/``).

- Each attempt gets a fresh copy (`make_work_dir`: reflinks where the filesystem has them,
  `worker.clone`), plus the checkpoint it resumes from put back where the program wrote it
  (`restore_checkpoint`), so a retry starts as the program expects and never from what the
  attempt before left half-written.
- What the program writes there is kept as the job's artifacts (``artifacts/<job>/``, beside what
  it wrote to ``LAUNCHBAY_OUTPUT_DIR``) when the attempt ends (`WorkDir.finish`): the files new or
  changed since the copy (`record_baseline`: each file's inode and ctime, which no program can
  set back), but Python's ``__pycache__``, moved there under the same relative path, then the
  directory is removed. Only
  regular files are kept: a symbolic link is never followed nor kept, and under a job user only
  the files that user owns (a hard link to someone else's file, which the kernel lets a user
  make where ``fs.protected_hardlinks`` is 0, is not the job's to publish).
- Every step on the artifacts side goes through directory descriptors opened without following
  links, since the job owned that directory while it ran.
"""

import errno
import logging
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from worker.clone import copy_file, copy_tree

log = logging.getLogger(__name__)

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# What the kept artifacts are: the worker's, readable by the data dir's group (the API).
FILE_MODE, DIR_MODE = 0o640, 0o750

Baseline = dict[str, tuple[int, int]]
# Python's cache of the program's compiled modules: the interpreter's, not the program's output.
PYCACHE = "__pycache__"


def make_work_dir(work: Path, code: Path | None, entrypoint: str | None) -> None:
    """A fresh `work` directory: a copy of `code` (an unpacked upload, or a single file that
    becomes `entrypoint`), or empty."""
    if work.is_symlink() or work.is_file():
        work.unlink()
    elif work.exists():
        shutil.rmtree(work)  # a try of this attempt before (a worker that died at its start)
    if code is None:
        work.mkdir(parents=True)
    elif code.is_dir():
        work.parent.mkdir(parents=True, exist_ok=True)
        copy_tree(code, work)
    elif code.is_file() and entrypoint is not None:
        target = work / entrypoint
        target.parent.mkdir(parents=True)
        copy_file(code, target)
    else:
        raise FileNotFoundError(f"uploaded code {code.name} is not on this worker")


def record_baseline(work: Path) -> Baseline:
    """Each regular file's (inode, ctime): a file written, replaced or chmod-ed since has
    another."""
    found: Baseline = {}
    for directory, _, files in os.walk(work, followlinks=False):
        for name in files:
            path = Path(directory, name)
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                found[path.relative_to(work).as_posix()] = (st.st_ino, st.st_ctime_ns)
    return found


def restore_checkpoint(kept: Path, target: Path) -> Path:
    """A copy of the kept checkpoint `kept` (file or directory) at `target`, for the program to
    read and overwrite as it likes: the kept one stays as it was registered."""
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if kept.is_dir():
        copy_tree(kept, target)
    else:
        copy_file(kept, target, mode=0o644)
    return target


@dataclass
class Kept:
    """What `keep_written` did: files kept (and their bytes), files left out and why."""

    files: int = 0
    bytes: int = 0
    refused: list[str] = field(default_factory=list)


def _open_or_make_dir(parent_fd: int, name: str, owner: tuple[int, int] | None) -> int:
    """The directory `name` in `parent_fd`, made when missing; whatever else is in its place (a
    file, a link the job planted) is removed first."""
    try:
        return os.open(name, DIRECTORY, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        os.unlink(name, dir_fd=parent_fd)
    os.mkdir(name, DIR_MODE, dir_fd=parent_fd)
    fd = os.open(name, DIRECTORY, dir_fd=parent_fd)
    if owner is not None:
        os.fchown(fd, *owner)
    os.fchmod(fd, DIR_MODE)
    return fd


def _copy_into(source: Path, dir_fd: int, name: str) -> None:
    """`source` copied as `name` in `dir_fd` (through a temporary name), then removed."""
    part = f".{name}.{os.getpid()}.part"
    copy_file(source, Path(f"/proc/self/fd/{dir_fd}") / part)
    os.rename(part, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    source.unlink()


def _move_into(source: Path, root_fd: int, rel: str, owner: tuple[int, int] | None) -> None:
    """Rename `source` to `rel` under `root_fd`, replacing what is there, then make it the
    worker's (`owner`) and readable by the group."""
    *parents, name = rel.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parents:
            inner = _open_or_make_dir(fd, part, owner)
            os.close(fd)
            fd = inner
        try:
            os.rename(source, name, dst_dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.EXDEV:  # artifacts on another filesystem than the runs
                _copy_into(source, fd, name)
            elif exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                shutil.rmtree(name, dir_fd=fd)  # a directory in the way
                os.rename(source, name, dst_dir_fd=fd)
            else:
                raise
        kept = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            if owner is not None:
                os.fchown(kept, *owner)
            os.fchmod(kept, FILE_MODE)
        finally:
            os.close(kept)
    finally:
        os.close(fd)


def keep_written(
    work: Path,
    baseline: Baseline,
    artifacts: Path,
    *,
    wanted: Callable[[str], bool],
    job_uid: int | None,
    owner: tuple[int, int] | None,
) -> Kept:
    """Move the regular files of `work` that are not in `baseline` as they were, that `wanted`
    takes and (with `job_uid`) that the job user owns, into `artifacts` (made `owner`'s)."""
    result = Kept()
    artifacts.mkdir(parents=True, exist_ok=True)
    root_fd = os.open(artifacts, DIRECTORY)
    try:
        for directory, dirs, files in os.walk(work, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d != PYCACHE)
            for name in sorted(files):
                path = Path(directory, name)
                rel = path.relative_to(work).as_posix()
                st = path.lstat()
                if baseline.get(rel) == (st.st_ino, st.st_ctime_ns) or not wanted(rel):
                    continue
                if not stat.S_ISREG(st.st_mode):
                    result.refused.append(f"{rel}: not a regular file")
                elif job_uid is not None and st.st_uid != job_uid:
                    result.refused.append(f"{rel}: not the job user's own file")
                else:
                    _move_into(path, root_fd, rel, owner)
                    result.files += 1
                    result.bytes += st.st_size
    finally:
        os.close(root_fd)
    return result


@dataclass
class WorkDir:
    """One attempt's working directory, its baseline once the job user has it, and where what
    the program wrote goes when the attempt ends."""

    root: Path
    artifacts: Path
    wanted: Callable[[str], bool]
    baseline: Baseline | None = None

    def record(self) -> None:
        self.baseline = record_baseline(self.root)

    def finish(self, job_uid: int | None, owner: tuple[int, int] | None) -> Kept | None:
        """Keep what the program wrote (when it was started: a baseline was recorded), then
        remove the directory."""
        kept = None
        try:
            if self.baseline is not None and self.root.is_dir():
                kept = keep_written(
                    self.root,
                    self.baseline,
                    self.artifacts,
                    wanted=self.wanted,
                    job_uid=job_uid,
                    owner=owner,
                )
                if kept.refused:
                    log.warning("%s: not kept as artifacts: %s", self.root, kept.refused[:20])
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
        return kept
