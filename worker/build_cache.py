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

log = logging.getLogger(__name__)

RELATIVE = Path(".cache") / "torch_extensions"
TORCH_ENV = "TORCH_EXTENSIONS_DIR"
MAX_BYTES = 2 * 1024**3


def owner_cache(data_dir: Path, owner: str) -> Path:
    key = hashlib.sha256(owner.encode()).hexdigest()[:32]
    return data_dir / "build-cache" / key / "torch_extensions"


def env(home: Path, spec_env: Mapping[str, str]) -> dict[str, str]:
    """`TORCH_EXTENSIONS_DIR` for a run under a job user: its home's cache (where `restore`
    puts the owner's builds), not the worker's (which the job user cannot write), unless the
    job's own `env` names one."""
    return {TORCH_ENV: spec_env.get(TORCH_ENV) or str(home / RELATIVE)}


def restore(data_dir: Path, owner: str, home: Path) -> bool:
    """Copy the owner's builds into the run's `home`; whether there were any. Call before the
    run's directories are given to its job user (which makes the copy the job user's)."""
    source = owner_cache(data_dir, owner)
    if not source.is_dir():
        return False
    _copy_tree(source, home / RELATIVE)
    return True


def save(data_dir: Path, owner: str, home: Path) -> bool:
    """Copy the run's builds back as the owner's (replacing the previous copy whole); whether
    they were kept. Call only when no process of the attempt is left."""
    source = home / RELATIVE
    if source.is_symlink() or not source.is_dir():
        return False
    size = _tree_bytes(source)
    if size == 0:
        return False
    if size > MAX_BYTES:
        log.warning("not keeping %s: %d bytes of builds, over %d", source, size, MAX_BYTES)
        return False
    cache = owner_cache(data_dir, owner)
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


def _copy_tree(source: Path, target: Path) -> None:
    """Directories and regular files only, never following a link; the worker owns the copy.
    A directory holding torch's build lock (``lock``: a build killed half-way) is left out,
    or every later job would wait forever for that lock to go."""
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    for entry in os.scandir(source):
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode) and os.path.lexists(os.path.join(entry.path, "lock")):
            log.warning("not keeping %s: its build did not finish", entry.path)
        elif stat.S_ISDIR(mode):
            _copy_tree(Path(entry.path), target / entry.name)
        elif stat.S_ISREG(mode):
            _copy_file(Path(entry.path), target / entry.name, entry.stat(follow_symlinks=False))


def _copy_file(source: Path, target: Path, info: os.stat_result) -> None:
    """A copy with the source's times: ninja, which torch runs for every load, rebuilds an
    extension whose files' times do not match its build log."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as reader, open(target, "wb") as writer:
        shutil.copyfileobj(reader, writer, 1024 * 1024)
    os.chmod(target, stat.S_IMODE(info.st_mode) & 0o755)
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))


def _tree_bytes(root: Path) -> int:
    total = 0
    for path, _, files in os.walk(root):
        for name in files:
            info = os.lstat(os.path.join(path, name))
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total
