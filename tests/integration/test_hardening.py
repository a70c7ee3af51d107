"""A service process made non-dumpable keeps its environment even from its own uid (the API
and the worker do it at start), and the SQLite database is closed to other users."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from service import hardening
from service.hardening import harden_service
from service.settings import Settings
from tests.support.isolation import python_for_job_users, reachable_by_job_users
from worker.isolation import lease_job_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another uid")

HOLDER = (
    "import sys, time\n"
    "from hardening import make_non_dumpable\n"
    "if sys.argv[1] == 'hardened': make_non_dumpable()\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
READER = (
    "import sys\n"
    "try:\n"
    "    open(f'/proc/{sys.argv[1]}/environ', 'rb').read()\n"
    "    print('read')\n"
    "except OSError as exc:\n"
    "    print(type(exc).__name__)\n"
)


def read_as_same_uid(uid: int, gid: int, mode: str, code: Path) -> str:
    """Whether a process of `uid` reads the environment of another of its own, started plain
    or `hardened`. The module runs from `code`, a copy the uid reaches (this checkout may lie
    under a directory it cannot search)."""
    env = {"PATH": os.environ["PATH"], "SECRET_OF_THE_SERVICE": "x"}
    python = python_for_job_users()
    holder = subprocess.Popen(
        [python, "-c", HOLDER, mode],
        env=env,
        user=uid,
        group=gid,
        extra_groups=[],
        cwd=code,
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"ready"
        done = subprocess.run(
            [python, "-c", READER, str(holder.pid)],
            user=uid,
            group=gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout.strip()
    finally:
        holder.kill()
        holder.wait()


def test_a_non_dumpable_process_hides_its_environment_from_its_own_uid(tmp_path: Path) -> None:
    # A user of the session's pool, leased as a job would: a job's worker in the other test
    # process sweeps the processes of a user it held when it gives it back.
    settings = Settings()
    user = lease_job_user(
        settings.job_user_lease_dir, settings.job_users, "test-hardening", settings.job_user_prefix
    )
    assert user is not None, "the session's pool of job users is exhausted"
    try:
        code = reachable_by_job_users(tmp_path / "code")
        shutil.copy(hardening.__file__, code / "hardening.py")
        os.chmod(code / "hardening.py", 0o644)
        assert read_as_same_uid(user.uid, user.gid, "plain", code) == "read"  # can fail
        assert read_as_same_uid(user.uid, user.gid, "hardened", code) == "PermissionError"
    finally:
        user.release()


def test_the_database_file_is_the_services_alone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    database = data / "launchbay.db"
    database.write_bytes(b"x")
    os.chmod(database, 0o644)
    harden_service(data, f"sqlite:///{database}")
    assert database.stat().st_mode & 0o777 == 0o600
    assert data.stat().st_mode & 0o777 == 0o711
    assert (data / "code").stat().st_mode & 0o777 == 0o750  # uploads: no job user passes
