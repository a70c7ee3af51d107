"""`launchbay worker --remove-job-users`: what root workers made on this host for their job users
(`worker.isolation`), removed: the pool's users (`LAUNCHBAY_JOB_USER_PREFIX` followed by a
number) with their groups, its lease directory (`LAUNCHBAY_JOB_USER_LEASE_DIR`, and its parent
when that is Launchbay's and left empty) and the empty ``launchbay`` cgroups above the jobs'.

Refused while a job runs under one of the users (its lease is held): the command names them
and their jobs. Otherwise it holds the pool's lock and every lease while the users go, so no
worker takes one meanwhile; a worker that still runs makes a user again when its next job
needs one, so the workers of the host keep running.
"""

import fcntl
import grp
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from service.settings import Settings
from worker.cgroups import detect_hierarchies
from worker.isolation import _pool_lock as pool_lock
from worker.isolation import kill_user_processes, read_lease_owner
from worker.leftovers import remove_leftovers


class UsersInUse(Exception):
    """Jobs run under job users of the pool; the message names them."""


@dataclass
class Removed:
    users: list[str] = field(default_factory=list)
    directories: list[Path] = field(default_factory=list)


def pool_users(prefix: str) -> list[pwd.struct_passwd]:
    """The host's users named `prefix` and a number, by number."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)")
    found = [(int(m.group(1)), u) for u in pwd.getpwall() if (m := pattern.fullmatch(u.pw_name))]
    return [user for _, user in sorted(found, key=lambda pair: pair[0])]


def _hold_leases(lease_dir: Path, prefix: str) -> tuple[list[int], list[str]]:
    """(the descriptors of every lease, now held; who holds the ones that could not be)."""
    held, in_use = [], []
    for lock in sorted(lease_dir.glob("*.lock")):
        if not lock.stem.isdigit():
            continue
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                job = read_lease_owner(lease_dir / f"{lock.stem}.job")
            except OSError:
                job = "?"
            in_use.append(f"{prefix}{lock.stem} (job {job})")
        held.append(fd)
    return held, in_use


def remove_job_users(settings: Settings) -> Removed:
    """Remove the pool's users and directories (module docstring); `UsersInUse` while a job
    runs under one of them."""
    prefix, lease_dir = settings.job_user_prefix, settings.job_user_lease_dir
    removed, had_leases = Removed(), lease_dir.exists()
    if not had_leases and not pool_users(prefix):
        return removed
    with pool_lock(lease_dir):
        held, in_use = _hold_leases(lease_dir, prefix)
        try:
            if in_use:
                raise UsersInUse(
                    f"jobs run under {', '.join(in_use)}: stop them (or wait for them to end), "
                    "then run this again"
                )
            for user in pool_users(prefix):
                _remove_user(user)
                removed.users.append(user.pw_name)
            shutil.rmtree(lease_dir)  # the locks held die with their files (`pool_lock`)
            if had_leases:
                removed.directories.append(lease_dir)
        finally:
            for fd in held:
                os.close(fd)
    parent = lease_dir.parent
    if parent.name == "launchbay" and _remove_if_empty(parent):
        removed.directories.append(parent)
    for hierarchy in detect_hierarchies():
        if _remove_if_empty(hierarchy.base):
            removed.directories.append(hierarchy.base)
    return removed


def _remove_user(user: pwd.struct_passwd) -> None:
    kill_user_processes(user.pw_uid)  # none while no lease is held; a dead worker's, else
    remove_leftovers(user.pw_uid, files=True)
    done = subprocess.run(["userdel", user.pw_name], capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"userdel {user.pw_name}: {done.stderr.strip()}")
    try:
        grp.getgrnam(user.pw_name)
    except KeyError:
        return  # gone with its user (USERGROUPS_ENAB)
    subprocess.run(["groupdel", user.pw_name], capture_output=True, check=True)


def _remove_if_empty(directory: Path) -> bool:
    try:
        directory.rmdir()
        return True
    except OSError:
        return False
