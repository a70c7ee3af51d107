"""What a root worker's job users need is checked when the worker starts (worker/reach.py): an
interpreter in a 0700 home is reached through the job's own mount namespace, the host's modes
unchanged; what no namespace fixes refuses the start, naming the path; and the users the
workers made are removed with `launchbay worker --remove-job-users` (real worker, real torchrun,
over HTTP)."""

import os
import re
import secrets
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.support.homes import Home, home_with_python
from tests.support.isolation import reachable_by_job_users
from tests.support.procs import SESSION_MARKER
from tests.support.stack import LAUNCHBAY, Stack
from worker.isolation import can_switch_users
from worker.job_user_pool import pool_users

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="job users need a root worker")

GATE = b"""
import os, time
gate, deadline = os.environ["GATE"], time.monotonic() + 120
while not os.path.exists(gate) and time.monotonic() < deadline:
    time.sleep(0.1)
print("through the gate" if os.path.exists(gate) else "no gate")
"""


def refusal(argv: Sequence[str], data_dir: Path, prefix: Sequence[str] = ()) -> str:
    """What a worker that must refuse to start says (it exits 1 at once)."""
    env = {**os.environ, "LAUNCHBAY_DATA_DIR": str(data_dir), SESSION_MARKER: "refusal"}
    env["LAUNCHBAY_REDIS_URL"] = "redis://127.0.0.1:9/0"  # never reached: it refuses first
    done = subprocess.run(
        [*prefix, *argv, "worker"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    return " ".join(done.stderr.split())


def test_a_data_dir_under_a_0700_parent_is_refused_at_start_naming_the_parent(
    tmp_path: Path,
) -> None:
    parent = reachable_by_job_users(tmp_path / "private")
    parent.chmod(0o700)
    said = refusal([LAUNCHBAY], parent / "data")
    assert f"job users cannot reach the data dir {parent / 'data'}: {parent} is not" in said
    assert f"chmod o+x {parent}" in said and "LAUNCHBAY_DATA_DIR" in said


NOEXEC = "a filesystem mounted noexec: jobs' environments would not run there. Remount it exec"
READ_ONLY = "a read-only filesystem: the worker could not write jobs' files there. Remount it rw"


@pytest.mark.parametrize(("option", "said"), [("noexec", NOEXEC), ("ro", READ_ONLY)])
def test_a_data_dir_on_a_noexec_or_read_only_filesystem_is_refused_at_start(
    tmp_path: Path, option: str, said: str
) -> None:
    mount = reachable_by_job_users(tmp_path / "mount")
    # A filesystem of the worker's own mount namespace alone: nothing of it reaches the host.
    script = 'mount -t tmpfs -o "$0" tmpfs "$1" && shift && exec "$@"'
    mounted = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, option]
    mounted.append(str(mount))
    told = refusal([LAUNCHBAY], mount / "data", prefix=mounted)
    assert f"the data dir {mount / 'data'} is on {said}" in told


def test_a_job_user_that_cannot_run_the_interpreter_is_refused_at_start_naming_it(
    tmp_path: Path,
) -> None:
    with home_with_python() as home:
        home.python.chmod(0o750)  # the home's own copy
        said = refusal(home.launchbay(), reachable_by_job_users(tmp_path / "data"))
    assert f"job users cannot run the interpreter, {home.python}: other users may not" in said
    assert "(mode 0750)" in said and f"chmod o+rx {home.python}" in said


def test_without_namespaces_an_interpreter_in_a_0700_home_is_refused_naming_the_home(
    tmp_path: Path,
) -> None:
    """A root worker without CAP_SYS_ADMIN (an unprivileged container) cannot give jobs the
    namespace through which they reach a 0700 home: it says so, and the ways out."""
    with home_with_python() as home:
        without = ["setpriv", "--bounding-set", "-sys_admin", "--"]
        said = refusal(home.launchbay(), reachable_by_job_users(tmp_path / "data"), without)
        closed = home.closed
    assert f"job users cannot reach the interpreter, {os.path.realpath(home.python)}" in said
    assert f"{closed} is not searchable by other users (mode 0700)" in said
    assert "cannot give jobs a mount namespace" in said
    assert f"chmod o+x {closed}" in said and "PYTHON=/usr/bin/python3.11" in said


def home_stack(root: Path, sqlite_url: str, redis_url: str, home: Home, **env: str) -> Stack:
    stack = make_stack(root, sqlite_url, redis_url, **env)
    stack.start_api()
    stack.start_worker(launchbay=home.launchbay())
    return stack


def test_a_job_runs_from_an_interpreter_in_a_0700_home_and_the_home_stays_0700(
    tmp_path: Path, sqlite_url: str, redis_url: str
) -> None:
    """pyenv's Python under /root on a fresh machine: the worker runs from a virtual
    environment made from an interpreter that lies in a 0700 home, and its jobs' users reach it
    through their own namespace (torchrun, two ranks importing torch)."""
    spec = {"name": "home", "recipe": "synthetic", "nproc_per_node": 2, "config": {"epochs": 2}}
    with home_with_python() as home:
        stack = home_stack(tmp_path / "stack", sqlite_url, redis_url, home)
        try:
            with stack.client() as http:
                job_id = http.post("/v1/jobs", json=spec).json()["id"]
                job = stack.wait_for_state(http, job_id, {"succeeded", "failed"}, timeout=180)
        finally:
            stack.stop()
        assert job["state"] == "succeeded", job
        assert stat.S_IMODE(home.root.stat().st_mode) == 0o700
        logged = " ".join((stack.root / "worker-0.log").read_text().split())
        assert f"under {home.closed} through their own mount namespace only" in logged


def run_gated(stack: Stack, gate: Path) -> str:
    with stack.client() as http:
        code = http.post("/v1/code", files={"file": ("gate.py", GATE, "text/x-python")})
        spec = {
            "name": "gated",
            "code": {"code_id": code.json()["code_id"], "entrypoint": "gate.py"},
            "launcher": "python",
            "nproc_per_node": 1,
            "env": {"GATE": str(gate)},
        }
        job_id: str = http.post("/v1/jobs", json=spec).json()["id"]
        stack.wait_for_state(http, job_id, {"running"}, timeout=120)
    return job_id


def remove_users(stack: Stack) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAUNCHBAY, "worker", "--remove-job-users"],
        env=stack.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_removing_the_job_users_refuses_while_a_job_runs_and_the_other_worker_keeps_running(
    tmp_path: Path, sqlite_url: str, redis_url: str
) -> None:
    """Two root workers of one host share a pool of job users (one of the test's own); while
    a job runs under one of them the users cannot be removed; once it ended they are, and both
    workers keep running: the next job's user is made again."""
    prefix = f"lbr{secrets.token_hex(3)}-"
    pool = {"LAUNCHBAY_JOB_USER_PREFIX": prefix}
    stack = make_stack(tmp_path / "stack", sqlite_url, redis_url, **pool)
    pool["LAUNCHBAY_JOB_USER_LEASE_DIR"] = str(stack.root / "leases")
    stack.extra_env.update(pool)
    try:
        stack.start_api()
        workers = [stack.start_worker(), stack.start_worker()]
        gate = stack.data_dir / "gate"
        job_id = run_gated(stack, gate)

        made = [u.pw_name for u in pool_users(prefix)]  # the job's, and the start checks'
        refused = remove_users(stack)
        assert refused.returncode == 1, refused
        said = " ".join(refused.stderr.split())
        assert re.search(rf"jobs run under {prefix}\d+ \(job {job_id}\): stop them", said), said
        assert [u.pw_name for u in pool_users(prefix)] == made

        gate.touch()
        with stack.client() as http:
            assert stack.wait_for_state(http, job_id, {"succeeded"})
        removed = remove_users(stack)
        assert removed.returncode == 0, removed
        assert f"removed {len(made)} job user(s): {', '.join(made)}" in removed.stdout
        assert pool_users(prefix) == [] and not (stack.root / "leases").exists()

        assert all(worker.poll() is None for worker in workers)
        gate.unlink()
        again = run_gated(stack, gate)
        gate.touch()
        with stack.client() as http:
            assert stack.wait_for_state(http, again, {"succeeded"})
        assert pool_users(prefix) != []
    finally:
        stack.stop()
        remove_users(stack)
    assert pool_users(prefix) == []
