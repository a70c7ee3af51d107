"""The test suite leaves the host as it found it: a session of it, run from an interpreter in a
0700 home (pyenv's under /root on a fresh machine), runs jobs as root under job users of its own
and ends with the home still 0700 and those users, their lease directory and its temporary
directory gone (tests/support/isolation.py, tests/conftest.py)."""

import os
import secrets
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.homes import ROOT, home_with_python
from tests.support.isolation import LEASE_DIR_ENV, PREFIX_ENV, HostSnapshot
from worker.isolation import can_switch_users
from worker.job_user_pool import pool_users

# Two jobs as a job user (torchrun, in-process workers), checking the user is the pool's.
INNER = "tests/integration/worker/test_isolation.py::test_a_job_reaches_nothing_of_the_service_or_of_another_job"  # noqa: E501


@pytest.mark.skipif(not can_switch_users(), reason="job users need a root worker")
def test_a_session_of_the_suite_removes_its_job_users_and_changes_no_mode_outside_its_dirs() -> (
    None
):
    prefix = f"lbs{secrets.token_hex(3)}-"
    with home_with_python() as home:
        watched = (home.root, *home.root.parents, *home.python.parents)
        before = HostSnapshot.take(prefix, watched)
        env = {k: v for k, v in os.environ.items() if k not in (PREFIX_ENV, LEASE_DIR_ENV)}
        argv = [str(home.venv_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", INNER]
        session = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**env, PREFIX_ENV: prefix},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output, _ = session.communicate(timeout=300)
        assert session.returncode == 0, output
        assert "1 passed" in output, output
        assert before.changes(HostSnapshot.take(prefix, watched)) == []
    assert pool_users(prefix) == []
    assert not (Path(tempfile.gettempdir()) / f"launchbay-tests-{session.pid}").exists()
