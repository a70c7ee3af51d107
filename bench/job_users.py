"""The job users of the stacks a benchmark run starts: a pool of its own (`private_job_users`)."""

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import environ_set


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

    with (
        tempfile.TemporaryDirectory(prefix="launchbay-bench-users-") as root,
        environ_set(
            {
                "LAUNCHBAY_JOB_USER_PREFIX": f"lbb{uuid.uuid4().hex[:6]}-",
                "LAUNCHBAY_JOB_USER_LEASE_DIR": str(Path(root) / "leases"),
            }
        ),
    ):
        try:
            yield
        finally:
            remove_job_users(Settings())
