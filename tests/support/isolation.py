"""A root worker's job users must reach the data dir, but pytest keeps its temporary
directories 0700 (and sets them back at every session's start). The data dirs of tests that
run jobs live under a directory of this session's instead, searchable by others, as an
operator makes the data dir's parents; it is removed when the session ends."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

_BASE = Path(tempfile.gettempdir()) / f"launchbay-tests-{os.getpid()}"


def reachable_by_job_users(path: Path) -> Path:
    """A new directory named like `path` that job users may reach (`path` itself when not root,
    where there are no job users)."""
    if os.geteuid() != 0:
        path.mkdir(parents=True, exist_ok=True)
        return path
    _BASE.mkdir(exist_ok=True)
    os.chmod(_BASE, 0o711)
    parent = Path(tempfile.mkdtemp(dir=_BASE))
    os.chmod(parent, 0o711)
    target = parent / path.name
    target.mkdir()
    return target


def remove_reachable_dirs() -> None:
    shutil.rmtree(_BASE, ignore_errors=True)


def interpreter_reachable_by_job_users() -> None:
    """Let job users run this interpreter and import this checkout (both may lie under a 0700
    home directory, /root on the project's machines): its directories become searchable."""
    for place in (Path(sys.executable).resolve().parent, Path(sys.prefix), Path.cwd()):
        if os.geteuid() == 0:
            for directory in (place, *place.parents):
                mode = directory.stat().st_mode
                if not mode & 0o001:
                    os.chmod(directory, (mode & 0o7777) | 0o001)
