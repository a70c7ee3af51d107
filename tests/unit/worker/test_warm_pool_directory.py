"""The fork servers' socket directories: private to the worker, and gone with the last worker."""

import os
import tempfile
from pathlib import Path

import pytest

from tests.support.isolation import reachable_by_job_users
from worker.warm_pool import WarmPool, pool_directory

NOBODY = 65534


def test_the_last_worker_to_close_removes_the_common_directory(tmp_path: Path) -> None:
    lease_dir = tmp_path / "leases"
    first, second = pool_directory(lease_dir, 101), pool_directory(lease_dir, 102)
    base = lease_dir.parent / "warm"
    assert first.parent == second.parent == base
    assert all(os.stat(d).st_mode & 0o777 == 0o700 for d in (base, first, second))

    WarmPool(first, 101, idle_s=1.0).close()
    assert not first.exists() and second.is_dir()  # the other worker's is kept, and so is base
    WarmPool(second, 102, idle_s=1.0).close()
    assert not base.exists()

    again = pool_directory(lease_dir, 103)  # made anew by the next worker
    assert again.is_dir() and os.stat(base).st_mode & 0o777 == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's worker needs root to play it")
def test_a_common_directory_it_may_not_enter_sends_it_to_its_own(tmp_path: Path) -> None:
    """An ordinary user's worker beside root's: the workers' common directory is root's (0700),
    so it can neither make its own there nor look inside (EACCES): it uses its own under its
    temporary directory, and starts."""
    where = reachable_by_job_users(tmp_path / "host")  # its parents searchable by others
    lease_dir = where / "leases"
    root_made = pool_directory(lease_dir, 105)  # root's worker, first
    own_tmp = where / "tmp"
    own_tmp.mkdir()
    os.chown(own_tmp, NOBODY, NOBODY)
    pid = os.fork()
    if pid == 0:  # the other user's worker
        code = 1
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            tempfile.tempdir = str(own_tmp)
            made = pool_directory(lease_dir, 106)
            code = 0 if made == own_tmp / f"lb-warm-{NOBODY}" / "106" else 2
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert root_made.is_dir()
