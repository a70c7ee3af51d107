"""What keeps the service's secrets from the jobs it runs, on the service's side: its
processes are not dumpable (no other process of its uid reads /proc/<pid>/environ or its
memory), and its files are closed to other users (docs/security.md)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobs.contract.data_dir import DataLayout

PR_SET_DUMPABLE = 4


def service_dir_modes(layout: DataLayout) -> dict[Path, int]:
    """The modes of the data dir's shared directories. Job users may pass the directories that
    lead to their own files, list none of them, and not pass code/: an upload is named by its
    sha256, which anyone who has its bytes knows, and jobs run their own copy of it (their
    working directory). The service's group (the worker, when it is not root and not the API's
    uid) may read uploads."""
    return {
        layout.root: 0o711,
        layout.runs: 0o711,
        layout.checkpoints: 0o711,
        layout.artifacts: 0o711,
        layout.envs: 0o711,
        layout.code: 0o750,
    }


def make_non_dumpable() -> bool:
    """Close this process's /proc/<pid>/environ, mem and the like to every other process of
    its uid (``prctl(PR_SET_DUMPABLE, 0)``); False where the platform cannot."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def tighten(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except FileNotFoundError:
        pass


def protect_service_files(data_dir: Path, database_url: str) -> None:
    """The modes that keep a job user out of the service's files (see the module docstring)."""
    # Imported here: tests/integration/test_hardening.py runs this module alone, as a job user
    # who can import nothing of Launchbay, for `make_non_dumpable`.
    from jobs.contract.data_dir import DataLayout

    layout = DataLayout(data_dir)
    for directory, mode in service_dir_modes(layout).items():
        directory.mkdir(parents=True, exist_ok=True)
        tighten(directory, mode)
    tighten(layout.supervisors, 0o700)
    if database_url.startswith("sqlite:///"):
        database = Path(database_url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm", "-journal"):
            tighten(database.with_name(database.name + suffix), 0o600)


def harden_service(data_dir: Path, database_url: str) -> None:
    """At the start of the API and of a worker."""
    make_non_dumpable()
    try:
        protect_service_files(data_dir, database_url)
    except OSError:
        pass  # a data dir of another owner (a worker on a shared volume): its owner's to set
