"""Every process of a job ends with its attempt, found by its cgroup: a daemon that double-forks,
`setsid`s, ignores SIGTERM and drops the job's environment is gone after success and after a
cancel."""

import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from jobs.states import JobState
from service.db import session_scope
from service.records import transition_job
from tests.integration.worker.conftest import WorkerEnv
from tests.integration.worker.test_stops import run_in_background
from tests.support.procs import wait_until
from worker.cgroups import cgroup_name, detect_hierarchies

pytestmark = pytest.mark.skipif(
    not detect_hierarchies(), reason="needs a writable cgroup hierarchy (root; CI runs as root)"
)


def marked(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and (
                proc.environ().get("DAEMON_MARKER") == marker
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def pid_file(wenv: WorkerEnv, job_id: str) -> Path:
    return wenv.settings.data_dir.resolve() / "artifacts" / job_id / "daemon.pid"


@pytest.fixture
def daemon_env() -> Iterator[dict[str, str]]:
    marker = uuid.uuid4().hex
    try:
        yield {"DAEMON_MARKER": marker}
    finally:
        for proc in marked(marker):
            proc.kill()


def assert_gone(wenv: WorkerEnv, job_id: str, env: dict[str, str]) -> None:
    pid = int(pid_file(wenv, job_id).read_text())
    assert not marked(env["DAEMON_MARKER"]), "the daemon outlived its job"
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    for hierarchy in detect_hierarchies():
        assert not (hierarchy.base / cgroup_name(job_id, 1)).exists()


def test_a_daemon_is_gone_when_its_job_succeeds(
    wenv: WorkerEnv, daemon_env: dict[str, str]
) -> None:
    job_id = wenv.submit("daemon.py", nproc_per_node=1, env=daemon_env)
    result = wenv.run(job_id)
    assert wenv.job(job_id).state == "succeeded", wenv.job(job_id).message
    assert not result.survivors
    assert_gone(wenv, job_id, daemon_env)


def test_a_daemon_is_gone_when_its_job_is_cancelled(
    wenv: WorkerEnv, daemon_env: dict[str, str]
) -> None:
    job_id = wenv.submit("daemon.py", nproc_per_node=1, args=["wait"], env=daemon_env)
    thread, _ = run_in_background(wenv, job_id)
    assert wait_until(lambda: pid_file(wenv, job_id).exists(), timeout=60)
    assert wait_until(lambda: wenv.job(job_id).state == "running", timeout=30)
    with session_scope(wenv.engine) as session:
        assert transition_job(session, job_id, JobState.CANCELLING)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert wenv.job(job_id).state == "cancelled"
    assert_gone(wenv, job_id, daemon_env)


def test_a_job_over_its_memory_limit_ends_oom(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("hog.py", launcher="python", nproc_per_node=1, memory_limit_bytes=2**28)
    wenv.run(job_id)
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("failed", "oom"), job.message
    assert not any("never ran out" in line.line for line in wenv.logs(job_id))


def test_a_jobs_disk_use_is_measured_when_its_attempt_ends(wenv: WorkerEnv) -> None:
    size = 3 * 2**20
    job_id = wenv.submit(
        "writer.py", launcher="python", nproc_per_node=1, env={"WRITE_BYTES": str(size)}
    )
    wenv.run(job_id)
    job = wenv.job(job_id)
    assert job.state == "succeeded", job.message
    assert job.disk_bytes is not None and size <= job.disk_bytes < size + 2**20


def test_a_confined_jobs_processes_are_recorded_from_its_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a cgroup, a poll reads the job's own processes, not the whole process table (a
    scan of tens of milliseconds on a busy host, every few seconds while the ranks train),
    and still finds a child that left the launcher's session."""
    import os
    import sys

    from worker import process_tree
    from worker.cgroups import JobCgroup
    from worker.launch import LaunchPlan

    cgroup = JobCgroup.create(f"test-poll-{uuid.uuid4().hex[:8]}")
    assert cgroup is not None
    started = tmp_path / "started"
    # Popen returns once `sleep` has its own session and has exec'd; the marker says so, so the
    # test's polls never record the forked child in the moment before its `setsid`.
    child = (
        "import pathlib, subprocess, time; "
        "subprocess.Popen(['sleep', '60'], start_new_session=True); "
        f"pathlib.Path({str(started)!r}).touch()"
    )
    plan = LaunchPlan(
        argv=[sys.executable, "-c", f"{child}; time.sleep(60)"], env=dict(os.environ), cwd=tmp_path
    )
    tree = process_tree.start_launcher(plan, tmp_path / "launcher.log", None, cgroup)
    try:

        def scanned() -> dict[int, process_tree.Proc]:
            raise AssertionError("the whole process table was scanned")

        monkeypatch.setattr(process_tree, "live_processes", scanned)

        assert wait_until(started.exists, timeout=20)

        def both_recorded() -> bool:
            tree.poll()
            return tree.descendants >= 1

        assert wait_until(both_recorded, timeout=20)
        sleeper = [r for r in tree.records.values() if r.pid != tree.pid]
        assert len(sleeper) == 1 and sleeper[0].sid == sleeper[0].pid  # a session of its own
    finally:
        monkeypatch.undo()
        assert process_tree.stop_job_processes(tree, 1.0) == []
        cgroup.remove()
