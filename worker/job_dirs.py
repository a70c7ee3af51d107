"""The directories of an attempt as its job user gets them and as the worker takes them back
(`worker.isolation` has the rules: who owns what, and why)."""

import os
import shutil
import stat
import uuid
from pathlib import Path

from service.hardening import tighten as _tighten
from worker import scratch
from worker.clone import copy_file
from worker.launch import RunPaths

SCRATCH = tuple(name for name, _ in scratch.SCRATCH_DIRS)  # ``tmp``, ``var-tmp``


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    """Every entry under `path` made `uid`:`gid`, but a file with another name elsewhere: a hard
    link the job made to someone else's file must not change that file's owner."""
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            entry = os.path.join(root, name)
            st = os.lstat(entry)
            if stat.S_ISDIR(st.st_mode) or st.st_nlink == 1:
                os.lchown(entry, uid, gid)


def _scratch_dirs(paths: RunPaths) -> list[Path]:
    return [paths.run_dir / name for name in SCRATCH]


def give_directories(paths: RunPaths, uid: int, gid: int) -> None:
    """Make the attempt's directories the job user's (see the module docstring)."""
    group = os.stat(paths.data_dir).st_gid
    for directory in (paths.run_dir.parent, paths.run_dir, paths.checkpoint_dir.parent):
        directory.mkdir(parents=True, exist_ok=True)
        os.chown(directory, 0, group)
        _tighten(directory, 0o711)
    for directory in (paths.home_dir, paths.log_dir, *_scratch_dirs(paths)):
        directory.mkdir(exist_ok=True)
    paths.log_dir.mkdir(parents=True, exist_ok=True)
    paths.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    os.close(os.open(paths.events_file, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
    owned = (paths.home_dir, paths.log_dir, paths.work_dir, paths.checkpoint_dir)
    for directory in (*owned, *_scratch_dirs(paths)):
        if directory.exists() and not directory.is_symlink():
            _chown_tree(directory, uid, gid)
            _tighten(directory, 0o700)
    os.lchown(paths.events_file, uid, gid)
    # Artifacts: the job's to write, readable by the service's group to serve.
    paths.output_dir.mkdir(parents=True, exist_ok=True)
    _chown_tree(paths.output_dir, uid, group)
    _tighten(paths.output_dir, 0o750)
    # The checkpoints Launchbay keeps: the worker's, the job's to read only through the API.
    paths.kept_dir.mkdir(parents=True, exist_ok=True)
    os.lchown(paths.kept_dir, os.getuid(), group)
    _tighten(paths.kept_dir, 0o750)


def _drop_foreign(root: Path, uid: int) -> None:
    """Remove from `root` (a directory the job user wrote) every file another user owns: only
    a hard link can put one there, and what it names is not the job's to publish nor to chown.
    A file of the job's own with another name elsewhere becomes a file of its own (a copy)."""
    for directory, _, files in os.walk(root, followlinks=False):
        for name in files:
            path = Path(directory, name)
            st = path.lstat()
            if st.st_uid != uid:
                path.unlink()
            elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                alone = path.with_name(f".{name}.{uuid.uuid4().hex}.unlinked")
                copy_file(path, alone)
                os.replace(alone, path)


def take_back_directories(paths: RunPaths, *, checkpoints: bool, uid: int | None = None) -> None:
    """The attempt's directories (and its job's artifacts) owned by the worker again; its
    scratch removed. The working directory is `worker.workdir`'s to empty, the rest
    `worker.attempt`'s to remove."""
    for path in _scratch_dirs(paths):
        shutil.rmtree(path, ignore_errors=True)
    group = os.stat(paths.data_dir).st_gid
    owned = [paths.home_dir, paths.log_dir, paths.events_file]
    owned += [paths.output_dir] if checkpoints else []
    if checkpoints and uid is not None and paths.output_dir.is_dir():
        _drop_foreign(paths.output_dir, uid)
    for path in owned:
        if path.exists() and not path.is_symlink():
            _chown_tree(path, os.getuid(), group)
