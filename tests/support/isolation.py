"""Test data dirs live under pytest's 0700 temporary directories: a root worker's job users
must still reach them, as an operator makes the data dir's parents searchable."""

import os
import sys
from pathlib import Path


def reachable_by_job_users(path: Path) -> Path:
    """Make `path` (created if missing) and each directory above it searchable by others."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        for directory in (path, *path.parents):
            mode = directory.stat().st_mode
            if not mode & 0o001:
                os.chmod(directory, (mode & 0o7777) | 0o001)
    return path


def interpreter_reachable_by_job_users() -> None:
    """Let job users run this interpreter and import this checkout (both may lie under a 0700
    home directory, /root on the project's machines): its directories become searchable."""
    for place in (Path(sys.executable).resolve().parent, Path(sys.prefix), Path.cwd()):
        if os.geteuid() == 0:
            for directory in (place, *place.parents):
                mode = directory.stat().st_mode
                if not mode & 0o001:
                    os.chmod(directory, (mode & 0o7777) | 0o001)
