"""The fork servers' socket directories: private to the worker, and gone with the last worker."""

import os
from pathlib import Path

from worker.warm_pool import WarmPool, pool_directory


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
