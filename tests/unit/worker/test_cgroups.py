"""The cgroup v2 path of `worker.cgroups`, against a fake cgroupfs in a temporary directory
(this project's machines mount cgroup v1 controllers; v2 there has no controllers). Where the
kernel would make a cgroup's interface files on mkdir, the test makes them."""

import os
import signal
import subprocess
from pathlib import Path

import pytest

from worker import cgroups
from worker.cgroups import Hierarchy, JobCgroup

OWN = "/system.slice/launchbay-worker.service"
INTERFACE = {
    "cgroup.procs": "",
    "cgroup.kill": "",
    "cgroup.subtree_control": "",
    "memory.max": "max",
    "memory.swap.max": "max",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n",
    "pids.max": "max",
}


DETECT = cgroups.detect_hierarchies.__wrapped__  # not cached: each test has its own tree


def make_cgroup(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in INTERFACE.items():
        (directory / name).write_text(text)
    return directory


@pytest.fixture
def unified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A v2 host: the unified tree at `tmp_path`, this worker in OWN."""
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    own = make_cgroup(tmp_path / OWN.lstrip("/"))
    (own / "cgroup.controllers").write_text("cpu memory pids\n")  # delegated to the worker
    monkeypatch.setattr(cgroups, "_own_paths", lambda: {"unified": OWN})
    monkeypatch.setattr(cgroups, "detect_hierarchies", lambda: DETECT(tmp_path))
    return tmp_path


def test_v2_is_found_under_the_workers_own_cgroup(unified: Path) -> None:
    base = unified / OWN.lstrip("/")
    assert cgroups.detect_hierarchies() == (Hierarchy("unified", base / "launchbay", OWN),)
    assert cgroups.describe_support() is None


def test_v2_without_delegated_controllers_is_said_at_start(unified: Path) -> None:
    (unified / OWN.lstrip("/") / "cgroup.controllers").write_text("cpu\n")
    support = cgroups.describe_support()
    assert support is not None and "['memory', 'pids']" in support and "NOT enforced" in support


def test_v2_not_writable_means_no_cgroup(unified: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cgroups.os, "access", lambda path, mode: False)
    assert cgroups.detect_hierarchies() == ()
    assert JobCgroup.create("j-1") is None
    support = cgroups.describe_support()
    assert support is not None and "NOT enforced" in support


def test_a_v2_job_cgroup_delegates_the_controllers_and_sets_its_limits(unified: Path) -> None:
    base = unified / OWN.lstrip("/")
    make_cgroup(base / "launchbay")
    job_dir = make_cgroup(base / "launchbay" / "j-1")

    group = JobCgroup.create("j-1", memory_limit_bytes=1 << 20, pids_max=64)

    assert group is not None and group.dirs == [job_dir]
    for parent in (base, base / "launchbay"):
        assert (parent / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (job_dir / "memory.max").read_text() == str(1 << 20)
    assert (job_dir / "memory.swap.max").read_text() == "0"
    assert (job_dir / "pids.max").read_text() == "64"
    # lifeline.py waits for one line of /proc/self/cgroup ending with this path: v2's
    # "0::/system.slice/launchbay-worker.service/launchbay/j-1"
    count, _, suffix = group.launcher_env.partition(":")
    assert count == "1" and f"0::{OWN}/launchbay/j-1".endswith(suffix)
    assert JobCgroup.existing("j-1") is not None and JobCgroup.existing("j-2") is None


def test_a_v2_job_cgroup_without_limits_leaves_them_alone(unified: Path) -> None:
    job_dir = make_cgroup(unified / OWN.lstrip("/") / "launchbay" / "j-1")
    assert JobCgroup.create("j-1") is not None
    assert (job_dir / "memory.max").read_text() == "max"
    assert (job_dir / "memory.swap.max").read_text() == "max"


def test_a_v2_job_cgroups_processes_and_oom_kills(unified: Path) -> None:
    job_dir = make_cgroup(unified / OWN.lstrip("/") / "launchbay" / "j-1")
    group = JobCgroup.create("j-1")
    assert group is not None
    group.add(4321)
    assert (job_dir / "cgroup.procs").read_text() == "4321"
    (job_dir / "cgroup.procs").write_text("4321\n8765\n")
    assert group.pids() == {4321, 8765}
    assert not group.oom_killed()
    (job_dir / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.oom_killed()


def test_a_v2_job_cgroup_is_killed_with_cgroup_kill(unified: Path) -> None:
    job_dir = make_cgroup(unified / OWN.lstrip("/") / "launchbay" / "j-1")
    group = JobCgroup.create("j-1")
    assert group is not None
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (job_dir / "cgroup.procs").write_text(f"{sleeper.pid}\n")
        # The fake's cgroup.procs never empties, as the kernel's would: the sweep gives up.
        left = group.kill_all(timeout_s=0.1)
        assert (job_dir / "cgroup.kill").read_text() == "1"
        assert sleeper.wait(timeout=10) == -signal.SIGKILL
        assert left == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_v2_job_cgroup_is_removed(unified: Path) -> None:
    job_dir = make_cgroup(unified / OWN.lstrip("/") / "launchbay" / "j-1")
    group = JobCgroup.create("j-1")
    assert group is not None
    for name in INTERFACE:  # the kernel's files go with the directory; the fake's first
        os.unlink(job_dir / name)
    group.remove()
    assert not job_dir.exists()
