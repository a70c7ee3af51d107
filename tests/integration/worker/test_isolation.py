"""A job runs as a job user: it finds no credential of the service anywhere it can look, and
cannot open the database, the worker's environment or another job's files (real torchrun,
real worker as root)."""

import hashlib
import json
import os
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from service.hardening import harden_service
from tests.integration.worker.conftest import WorkerEnv
from tests.support.isolation import python_for_job_users
from worker.isolation import JobUser, can_switch_users, lease_job_user

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="job users need a root worker")


def test_a_job_reaches_nothing_of_the_service_or_of_another_job(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin, redis_password = f"lb_{secrets.token_urlsafe(32)}", secrets.token_urlsafe(16)
    redis_url = f"redis://:{redis_password}@127.0.0.1:6379/0"
    for name, value in {
        "LAUNCHBAY_ADMIN_TOKEN": admin,
        "LAUNCHBAY_REDIS_URL": redis_url,
        "REDIS_PASSWORD": redis_password,
        "PGPASSWORD": redis_password,
    }.items():
        monkeypatch.setenv(name, value)  # in the worker's environment, as a careless operator's
    data = wenv.settings.data_dir.resolve()
    database = wenv.settings.resolved_database_url
    harden_service(data, database)  # what `launchbay api` and `launchbay worker` do at start

    other = wenv.submit("single.py", launcher="python", nproc_per_node=1)
    wenv.run(other)
    assert wenv.job(other).state == "succeeded"

    env = {
        "SNOOP_DATA_DIR": str(data),
        "SNOOP_OTHER_JOB": other,
        "SNOOP_DATABASE": database.removeprefix("sqlite:///"),
        "SNOOP_WORKER_PID": str(os.getpid()),
    }
    job_id = wenv.submit("snoop.py", nproc_per_node=1, env=env)
    code_id = hashlib.sha256(b"snoop.py").hexdigest()
    (wenv.settings.code_dir / code_id / "secrets.txt").write_text(f"{admin}\n{redis_password}\n")
    wenv.run(job_id)
    assert wenv.job(job_id).state == "succeeded", wenv.job(job_id).message
    report = json.loads(
        (wenv.settings.data_dir.resolve() / "artifacts" / job_id / "snoop.json").read_text()
    )

    assert report["uid"] not in (0, os.getuid())
    assert report["user"].startswith(wenv.settings.job_user_prefix)  # the session's pool
    assert report["found"] == []
    # This test's database lies under /tmp, outside the data dir: a job whose /tmp is its own
    # does not even see it (its mode is test_hardening's).
    assert report["database"] in ("PermissionError", "FileNotFoundError")
    assert report["worker_environ"] == "PermissionError"
    assert report["other_logs"] == "PermissionError"
    assert report["other_log_file"] == "PermissionError"
    assert report["other_checkpoints"] == "PermissionError"
    assert report["data_dir_listing"] == "PermissionError"


def test_no_two_jobs_share_a_job_user_at_once(wenv: WorkerEnv) -> None:
    lease_dir, pool = wenv.settings.job_user_lease_dir, wenv.settings.job_users
    prefix = wenv.settings.job_user_prefix
    first = lease_job_user(lease_dir, pool, "job-a", prefix)
    other = lease_job_user(lease_dir, pool, "job-b", prefix)
    node = lease_job_user(lease_dir, pool, "job-a", prefix)  # another node of job-a on this host
    # Not a node: a single-node attempt of job-a (its retry, say) never shares a user.
    alone = lease_job_user(lease_dir, pool, "job-a", prefix, shared=False)
    assert first is not None and other is not None and node is not None and alone is not None
    try:
        assert first.uid != other.uid
        assert node.uid == first.uid
        assert alone.uid not in (first.uid, other.uid)
        assert {first.uid, other.uid, alone.uid}.isdisjoint({0, os.getuid()})
    finally:
        for user in (alone, node, other, first):
            user.release()


def test_the_nodes_of_one_job_starting_together_share_its_job_user(wenv: WorkerEnv) -> None:
    """Two workers on one host start nodes of the same job at the same moment: both must run
    it as one user, or one node cannot write the checkpoints the other's user owns."""
    lease_dir, pool = wenv.settings.job_user_lease_dir, wenv.settings.job_users
    prefix = wenv.settings.job_user_prefix
    for round_ in range(3):
        start = threading.Barrier(2)

        def lease(job: str = f"job-{round_}", start: threading.Barrier = start) -> JobUser | None:
            start.wait()
            return lease_job_user(lease_dir, pool, job, prefix)

        with ThreadPoolExecutor(2) as threads:
            first, second = threads.map(lambda _: lease(), range(2))
        assert first is not None and second is not None
        try:
            assert first.uid == second.uid
        finally:
            second.release()
            first.release()


def test_a_node_joins_its_jobs_user_even_when_a_lower_one_is_free(wenv: WorkerEnv) -> None:
    """A retried multi-node attempt: the user of the node still here must be shared, not a
    free one found first, or the two nodes cannot write the same checkpoints."""
    lease_dir, pool = wenv.settings.job_user_lease_dir, wenv.settings.job_users
    prefix = wenv.settings.job_user_prefix
    other = lease_job_user(lease_dir, pool, "job-x", prefix)
    node = lease_job_user(lease_dir, pool, "job-j", prefix)
    assert other is not None and node is not None
    other.release()
    peer = lease_job_user(lease_dir, pool, "job-j", prefix)
    assert peer is not None
    try:
        assert peer.uid == node.uid
    finally:
        peer.release()
        node.release()


def test_a_lease_looks_for_leftovers_only_after_a_holder_that_did_not_give_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean release marks the lease, and the next lease skips the process-table scan; a
    lease whose holder died (its file still names its job) kills what that job left running.
    A lease dir and a uid of the test's own: no other job may lose its processes to it."""
    import subprocess

    import worker.isolation as isolation

    uid = gid = 2**31 - 7  # no user has it
    monkeypatch.setattr(isolation, "ensure_job_user", lambda name: (uid, gid))
    scans: list[int] = []
    real_kill = isolation.kill_user_processes

    def counted_kill(uid: int, timeout_s: float = 5.0) -> list[int]:
        scans.append(uid)
        return real_kill(uid, timeout_s)

    monkeypatch.setattr(isolation, "kill_user_processes", counted_kill)
    lease_dir = tmp_path / "leases"
    first = lease_job_user(lease_dir, 1, "job-first")
    assert first is not None and first.owner_file is not None
    assert scans == [uid]  # a lease never given back clean: looked for leftovers
    owner_file = first.owner_file
    first.release()
    assert isolation.read_lease_owner(owner_file) == isolation.CLEAN

    again = lease_job_user(lease_dir, 1, "job-next")
    assert again is not None and again.uid == uid
    assert scans == [uid]  # released clean: nothing looked for
    # The holder dies with a process of its job still running: its lease file names the job.
    leftover = subprocess.Popen(["sleep", "60"], user=uid, group=gid, extra_groups=[])
    try:
        os.close(again.lock_fd)  # the kernel drops a dead holder's lock like this
        assert isolation.read_lease_owner(owner_file) == "job-next"
        third = lease_job_user(lease_dir, 1, "job-third")
        assert third is not None and third.uid == uid
        assert scans == [uid, uid]
        assert leftover.wait(timeout=10) == -9
        third.release()
    finally:
        leftover.kill()
        leftover.wait()


PLANT = """
import ctypes, os, sys
name, key = sys.argv[1], int(sys.argv[2])
for directory in ("/tmp", "/var/tmp", "/dev/shm"):
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
os.makedirs(os.path.join("/tmp", name + ".d", "deeper"))
libc = ctypes.CDLL(None, use_errno=True)
made = [libc.shmget(key, 4096, 0o1600), libc.semget(key, 1, 0o1600), libc.msgget(key, 0o1600)]
sys.exit(1 if -1 in made else 0)
"""


def test_without_a_private_scratch_what_a_uid_left_goes_when_its_lease_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where attempts get no namespaces of their own (a root worker without CAP_SYS_ADMIN), the
    files a job user left in /tmp, /var/tmp and /dev/shm and its System V IPC objects are
    removed when its lease is given back; nobody else's are. A uid of the test's own."""
    import subprocess
    import uuid

    import worker.isolation as isolation
    from worker import leftovers, scratch

    uid = gid = 2**31 - 11  # no user has it
    monkeypatch.setattr(isolation, "ensure_job_user", lambda name: (uid, gid))
    monkeypatch.setattr(scratch, "unavailable", lambda: "no CAP_SYS_ADMIN (the test says)")
    name, key = f"leftover-{uuid.uuid4().hex}", 0x4C430000 + os.getpid() % 0xFFFF
    theirs = Path("/tmp") / f"{name}.root"  # another uid's, in the same directory
    theirs.touch()
    user = lease_job_user(tmp_path / "leases", 1, "job-a")
    assert user is not None and not user.private_scratch
    try:
        planted = subprocess.run(
            [python_for_job_users(), "-I", "-S", "-c", PLANT, name, str(key)],
            user=uid, group=gid, extra_groups=[], capture_output=True, text=True,
        )  # fmt: skip
        assert planted.returncode == 0, planted.stderr
        assert len(leftovers.ipc_objects(uid)) == 3
        user.release()
        assert leftovers.ipc_objects(uid) == []
        assert not any(Path(d, name).exists() for d in ("/tmp", "/var/tmp", "/dev/shm"))
        assert not Path("/tmp", f"{name}.d").exists()
        assert theirs.exists()
    finally:
        theirs.unlink()
        leftovers.remove_leftovers(uid, files=True)
