"""What a job compiles at run time survives between its owner's jobs: PyTorch's C++/CUDA
extension builds (``torch.utils.cpp_extension``'s JIT, which DeepSpeed uses for its ops: over
two minutes on a first run, seconds after).

Under job users a run's ``HOME`` is its own (``<run dir>/home``), so torch's default build
directory, ``$HOME/.cache/torch_extensions``, would start empty every attempt. The worker keeps
one copy per owner under ``<data dir>/build-cache/<owner key>/``, the worker's and unreadable to
jobs: before the run's directories become the job user's it copies it into the run's home, and
when the attempt's processes are gone (and the home is the worker's again) it copies the run's
builds back. An owner's jobs share what they
built; no other owner's job ever sees it, so a job cannot plant code another owner loads. Only
regular files and directories are copied (never a link the job made), and a run's builds over
`MAX_BYTES` are not kept.

Under job users the ranks' `TORCH_EXTENSIONS_DIR` is that cache in the run's home, whatever the
worker's says (a job's own `env` may name another). Without job users a run keeps the
worker's ``HOME`` and `TORCH_EXTENSIONS_DIR`, where torch's cache is shared already.
"""

import hashlib
import logging
import os
import shutil
import stat
import uuid
from collections.abc import Mapping
from pathlib import Path

from jobs.contract.data_dir import DataLayout

log = logging.getLogger(__name__)

RELATIVE = Path(".cache") / "torch_extensions"
TORCH_ENV = "TORCH_EXTENSIONS_DIR"
MAX_BYTES = 2 * 1024**3
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def owner_cache(data_dir: Path, owner: str) -> Path:
    key = hashlib.sha256(owner.encode()).hexdigest()[:32]
    return DataLayout(data_dir).owner_build_cache(key) / "torch_extensions"


def env(home: Path, spec_env: Mapping[str, str]) -> dict[str, str]:
    """`TORCH_EXTENSIONS_DIR` for a run under a job user: its home's cache (where `restore`
    puts the owner's builds), not the worker's (which the job user cannot write), unless the
    job's own `env` names one."""
    return {TORCH_ENV: spec_env.get(TORCH_ENV) or str(home / RELATIVE)}


def restore(data_dir: Path, owner: str, home: Path) -> bool:
    """Copy the owner's builds into the run's `home`; whether there were any. Call before the
    run's directories are given to its job user (which makes the copy the job user's)."""
    source = _open_tree(owner_cache(data_dir, owner))
    if source is None:
        return False
    try:
        _copy_tree(source, home / RELATIVE)
    finally:
        os.close(source)
    return True


def save(data_dir: Path, owner: str, home: Path) -> bool:
    """Copy the run's builds back as the owner's (replacing the previous copy whole); whether
    they were kept. Call only when no process of the attempt is left. No part of the way from
    `home` down is followed if it is a link: a job that made ``.cache`` a link to another
    owner's cache gets nothing copied."""
    source = _open_tree(home, *RELATIVE.parts)
    if source is None:
        return False
    try:
        return _keep(source, owner_cache(data_dir, owner))
    finally:
        os.close(source)


def _keep(source: int, cache: Path) -> bool:
    size = _tree_bytes(source)
    if size == 0:
        return False
    if size > MAX_BYTES:
        log.warning("not keeping %s: %d bytes of builds, over %d", cache, size, MAX_BYTES)
        return False
    cache.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(cache.parent.parent, 0o700)
    staging = cache.parent / f".incoming-{uuid.uuid4().hex}"
    _copy_tree(source, staging)
    retired = cache.parent / f".retired-{uuid.uuid4().hex}"
    if cache.exists():
        os.rename(cache, retired)
    os.rename(staging, cache)
    shutil.rmtree(retired, ignore_errors=True)
    return True


def _open_dir(name: str | Path, dir_fd: int | None = None) -> int | None:
    """A descriptor of the directory `name` (in `dir_fd`), or None when it is missing, a link
    or not a directory."""
    try:
        return os.open(name, DIRECTORY, dir_fd=dir_fd)
    except OSError:
        return None


def _open_tree(top: Path, *parts: str) -> int | None:
    """A descriptor of the directory `top`/`parts`, reached without following a link at any
    step; None when a step is missing, a link or not a directory."""
    fd = _open_dir(top)
    for part in parts:
        if fd is None:
            return None
        inner = _open_dir(part, fd)
        os.close(fd)
        fd = inner
    return fd


def _copy_tree(source: int, target: Path) -> None:
    """Directories and regular files of the directory `source` only, never following a link;
    the worker owns the copy. A directory holding torch's build lock (``lock``: a build killed
    half-way) is left out, or every later job would wait forever for that lock to go."""
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, info in _entries(source):
        if stat.S_ISREG(info.st_mode):
            _copy_file(source, name, target / name, info)
        elif stat.S_ISDIR(info.st_mode) and (inner := _open_dir(name, source)) is not None:
            try:
                if _has(inner, "lock"):
                    log.warning("not keeping %s: its build did not finish", target / name)
                else:
                    _copy_tree(inner, target / name)
            finally:
                os.close(inner)


def _entries(directory: int) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of each entry of the directory `directory`."""
    with os.scandir(directory) as entries:
        return [(entry.name, entry.stat(follow_symlinks=False)) for entry in entries]


def _has(directory: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=directory, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def _copy_file(directory: int, name: str, target: Path, info: os.stat_result) -> None:
    """A copy with the source's times: ninja, which torch runs for every load, rebuilds an
    extension whose files' times do not match its build log."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
    with os.fdopen(fd, "rb") as reader, open(target, "wb") as writer:
        shutil.copyfileobj(reader, writer, 1024 * 1024)
    os.chmod(target, stat.S_IMODE(info.st_mode) & 0o755)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def _tree_bytes(top: int) -> int:
    """Bytes of the regular files under the directory `top`, links not followed."""
    total = 0
    for _, _, files, directory in os.fwalk(".", dir_fd=top):
        for name in files:
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total
