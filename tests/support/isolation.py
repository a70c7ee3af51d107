"""What the test session owns on the host, and the proof that it leaves the host as it found it.

A root worker's job users must reach the data dir, but pytest keeps its temporary directories
0700 (and sets them back at every session's start). The data dirs of tests that run jobs live
under a directory of this session's instead, searchable by others, as an operator makes the
data dir's parents; it is removed when the session ends. The interpreter and this checkout are
left as they are: where they lie under a directory others may not search (/root on a fresh
machine), the jobs reach them through their own mount namespace (`worker.scratch`).

The session's job users are a pool of its own (`session_pool`: a prefix and a lease directory
of its own), removed at its end with `worker.job_user_pool.remove_job_users`, what `launchbay
worker --remove-job-users` runs. `HostSnapshot` is what the session may not change outside its
temporary directories: the modes of the directories above the interpreter, this checkout, the
temporary directory and Launchbay's host directories, whether those exist, and the users
named like the session's.
"""

import os
import pwd
import secrets
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_BASE = Path(tempfile.gettempdir()) / f"launchbay-tests-{os.getpid()}"
PREFIX_ENV, LEASE_DIR_ENV = "LAUNCHBAY_JOB_USER_PREFIX", "LAUNCHBAY_JOB_USER_LEASE_DIR"
# What root workers and the demo make on a host, outside any data dir.
LAUNCHBAY_HOST_DIRS = (Path("/run/launchbay"), Path("/var/lib/launchbay"))


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


def python_for_job_users() -> str:
    """An interpreter a job user may run outside the worker's namespace: this session's when
    every directory above it is searchable by others, else the system's (the test's own
    processes started as another uid have no masks to reach one under /root)."""
    ways = (Path(sys.executable), Path(os.path.realpath(sys.executable)))
    if all(os.stat(p).st_mode & stat.S_IXOTH for way in ways for p in way.parents):
        return sys.executable
    return shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable


def remove_reachable_dirs() -> None:
    shutil.rmtree(_BASE, ignore_errors=True)


def session_pool() -> str:
    """Give this session's workers (in this process and started from it) a pool of job users of
    their own, unless the environment names one; returns its prefix."""
    os.environ.setdefault(PREFIX_ENV, f"lbt{secrets.token_hex(3)}-")
    os.environ.setdefault(LEASE_DIR_ENV, str(_BASE / "job-users"))
    return os.environ[PREFIX_ENV]


def remove_session_pool() -> list[str]:
    """Remove the session's job users and lease directory; the users removed."""
    from service.settings import Settings
    from worker.job_user_pool import remove_job_users

    if os.geteuid() != 0:
        return []
    return remove_job_users(Settings()).users


def _watched_dirs() -> list[Path]:
    places = [Path(os.path.realpath(sys.executable)), Path(sys.prefix), Path.cwd()]
    places += [Path(tempfile.gettempdir()) / "x", Path.home() / "x"]
    places += [d / "x" for d in LAUNCHBAY_HOST_DIRS]
    return sorted({parent for place in places for parent in place.parents})


@dataclass(frozen=True)
class HostSnapshot:
    """What the session may not change (module docstring)."""

    modes: dict[str, int | None]
    users: frozenset[str]

    @classmethod
    def take(cls, prefix: str | None, extra: tuple[Path, ...] = ()) -> "HostSnapshot":
        """The host now; the users named `prefix`... (None: no user)."""
        modes: dict[str, int | None] = {}
        for directory in [*_watched_dirs(), *extra]:
            try:
                modes[str(directory)] = stat.S_IMODE(os.stat(directory).st_mode)
            except FileNotFoundError:
                modes[str(directory)] = None
        users = frozenset(
            u.pw_name for u in pwd.getpwall() if prefix and u.pw_name.startswith(prefix)
        )
        return cls(modes, users)

    def changes(self, now: "HostSnapshot") -> list[str]:
        """What differs in `now`, for a person."""

        def said(mode: int | None) -> str:
            return "absent" if mode is None else f"{mode:04o}"

        found = []
        for path, mode in self.modes.items():
            after = now.modes.get(path, mode)
            if after != mode:
                found.append(f"{path}: {said(mode)} -> {said(after)}")
        for user in sorted(now.users - self.users):
            found.append(f"user {user} was made and not removed")
        return found
