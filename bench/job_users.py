"""The job users of the stacks a benchmark run starts: a pool of its own (`private_job_users`)."""

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def private_job_users() -> Iterator[None]:
    """A pool of job users of the benchmarks' own for the stacks they start meanwhile (a root
    worker makes its job users as jobs need them), removed at the end as `launchbay worker
    --remove-job-users` does: a benchmark run leaves no users on the host."""
    if os.geteuid() != 0:
        yield
        return
    from service.settings import Settings
    from worker.job_user_pool import remove_job_users

    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-users-"))
    pool = {
        "LAUNCHBAY_JOB_USER_PREFIX": f"lbb{uuid.uuid4().hex[:6]}-",
        "LAUNCHBAY_JOB_USER_LEASE_DIR": str(root / "leases"),
    }
    before = {name: os.environ.get(name) for name in pool}
    os.environ.update(pool)
    try:
        yield
    finally:
        try:
            remove_job_users(Settings())
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            shutil.rmtree(root, ignore_errors=True)
