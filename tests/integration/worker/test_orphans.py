"""Nothing of a job outlives its supervisor: the launcher dies with the supervisor and each rank
with its launcher (the kernel's parent-death signal), and what a dead supervisor left is
stopped by the next worker (`worker.orphans`)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest

from tests.support.procs import wait_until
from worker.launch import RANK_ENTRY
from worker.orphans import SupervisorNote, note_path, stop_orphans
from worker.process_tree import LIFELINE, with_lifeline


def marked(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get("LAUNCHBAY_JOB_ID") == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    """A job id for the processes a test starts; whatever carries it is killed afterwards."""
    value = uuid.uuid4().hex
    try:
        yield value
    finally:
        for proc in marked(value):
            proc.kill()


def test_launcher_and_rank_die_with_a_sigkilled_supervisor(tmp_path: Path, marker: str) -> None:
    script = tmp_path / "forever.py"
    script.write_text("import time\nprint('rank running', flush=True)\ntime.sleep(600)\n")
    rank = [sys.executable, str(RANK_ENTRY), "--log-dir", str(tmp_path), "--script", str(script)]
    # A launcher that never stops its rank itself, under a supervisor that starts it as the
    # worker does.
    launcher = f"import subprocess, time; subprocess.Popen({rank!r}); time.sleep(600)"
    supervisor = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from worker.process_tree import with_lifeline
        argv = with_lifeline([sys.executable, "-c", {launcher!r}])
        subprocess.Popen(argv, start_new_session=True)
        time.sleep(600)
        """
    )
    env = {**os.environ, "LAUNCHBAY_JOB_ID": marker, "PYTHONPATH": str(Path.cwd())}
    proc = subprocess.Popen([sys.executable, "-c", supervisor], env=env, start_new_session=True)
    try:
        log = tmp_path / "rank-0.log"
        # The rank is running its program (it printed): on a loaded machine the log file
        # exists a while before that.
        assert wait_until(lambda: log.exists() and log.read_text() == "rank running\n", 30)
        assert wait_until(lambda: len(marked(marker)) == 3, timeout=10)
        proc.kill()
        killed = time.monotonic()
        assert wait_until(lambda: not marked(marker), timeout=5, interval=0.05)
        took = time.monotonic() - killed
    finally:
        proc.kill()
        proc.wait(5)
    assert took < 5
    assert (tmp_path / "rank-0.log").read_text() == "rank running\n"


def test_a_rank_whose_launcher_is_already_gone_exits_at_once(tmp_path: Path) -> None:
    script = tmp_path / "never.py"
    script.write_text("open('ran', 'w').close()\n")
    argv = [sys.executable, str(RANK_ENTRY), "--log-dir", str(tmp_path), "--script", str(script)]
    gone = {**os.environ, "LAUNCHBAY_LAUNCHER_PID": "1"}  # not our parent
    done = subprocess.run(argv, env=gone, cwd=tmp_path, timeout=30)
    assert done.returncode == 128 + signal.SIGKILL
    assert not (tmp_path / "ran").exists()


def test_the_lifeline_checks_the_parent_then_execs() -> None:
    me = os.getpid()
    lifeline = [sys.executable, str(LIFELINE)]
    command = [sys.executable, "-c", "import os; print(os.environ['LAUNCHBAY_LAUNCHER_PID'])"]
    ran = subprocess.run(with_lifeline(command), capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0 and ran.stdout.strip().isdigit()
    orphan = subprocess.run([*lifeline, str(me + 1), "15", "--", *command], timeout=30)
    assert orphan.returncode == 128 + signal.SIGTERM
    assert subprocess.run([*lifeline, "x"], capture_output=True, timeout=30).returncode != 0


def test_what_a_dead_supervisor_left_is_stopped(tmp_path: Path, marker: str) -> None:
    data = tmp_path / "data"
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    env = {**os.environ, "LAUNCHBAY_JOB_ID": marker, "LAUNCHBAY_ATTEMPT": "1"}
    # One process recorded in pids.json (whatever its environment), one found by it.
    recorded = subprocess.Popen(
        sleep, start_new_session=True, env={**env, "LAUNCHBAY_ATTEMPT": "9"}
    )
    unrecorded = subprocess.Popen(sleep, start_new_session=True, env=env)
    # The same job's attempt 2, whose supervisor (this process) lives: left alone.
    other = subprocess.Popen(sleep, start_new_session=True, env={**env, "LAUNCHBAY_ATTEMPT": "2"})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_started = psutil.Process(dead.pid).create_time()
    dead.wait()
    try:
        pids_file = tmp_path / "pids.json"
        info = psutil.Process(recorded.pid)
        pids_file.write_text(json.dumps([{"pid": recorded.pid, "create_time": info.create_time()}]))
        boot = psutil.boot_time()
        me = psutil.Process()
        notes = {
            1: SupervisorNote(marker, 1, dead.pid, dead_started, boot, str(pids_file)),
            2: SupervisorNote(marker, 2, me.pid, me.create_time(), boot, str(tmp_path / "x")),
        }
        for attempt, note in notes.items():
            path = note_path(data, marker, attempt)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(asdict(note)))

        stopped = stop_orphans(data)

        assert stopped == sorted([recorded.pid, unrecorded.pid])
        assert recorded.wait(5) == -signal.SIGKILL and unrecorded.wait(5) == -signal.SIGKILL
        assert other.poll() is None
        assert not note_path(data, marker, 1).exists() and note_path(data, marker, 2).exists()
        assert stop_orphans(data) == []
    finally:
        for proc in (recorded, unrecorded, other):
            proc.kill()
            proc.wait(5)


def test_a_dead_node_supervisor_s_orphans_are_stopped_not_its_peer_node_s(
    tmp_path: Path, marker: str
) -> None:
    """Two nodes of one multi-node attempt on one host: only the dead node's processes go."""
    data = tmp_path / "data"
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    env = {**os.environ, "LAUNCHBAY_JOB_ID": marker, "LAUNCHBAY_ATTEMPT": "1"}
    node_0 = subprocess.Popen(sleep, start_new_session=True, env={**env, "LAUNCHBAY_NODE": "0"})
    node_1 = subprocess.Popen(sleep, start_new_session=True, env={**env, "LAUNCHBAY_NODE": "1"})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_started = psutil.Process(dead.pid).create_time()
    dead.wait()
    try:
        boot, me = psutil.boot_time(), psutil.Process()
        notes = {
            0: SupervisorNote(marker, 1, me.pid, me.create_time(), boot, str(tmp_path / "a"), 0),
            1: SupervisorNote(marker, 1, dead.pid, dead_started, boot, str(tmp_path / "b"), 1),
        }
        for node, note in notes.items():
            path = note_path(data, marker, 1, node)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(asdict(note)))

        assert stop_orphans(data) == [node_1.pid]
        assert node_1.wait(5) == -signal.SIGKILL and node_0.poll() is None
        assert note_path(data, marker, 1, 0).exists() and not note_path(data, marker, 1, 1).exists()
    finally:
        for proc in (node_0, node_1):
            proc.kill()
            proc.wait(5)


@pytest.mark.skipif(os.geteuid() != 0, reason="job users need a root worker")
def test_a_dead_supervisor_s_directories_are_taken_back_from_its_job_user(tmp_path: Path) -> None:
    """What the attempt's supervisor does when it gives its job user back, the next worker does
    for it: the next job under that uid finds nothing of this one (no files it owns, no
    scratch). A uid of the test's own."""
    uid = 2**31 - 13
    data = tmp_path / "data"
    run_dir = data / "runs" / "job-x" / "attempt-1"
    for name in ("home", "logs", "tmp", "var-tmp"):
        (run_dir / name).mkdir(parents=True)
        (run_dir / name / "left.txt").write_text("the job's")
        for path in (run_dir / name, run_dir / name / "left.txt"):
            os.chown(path, uid, uid)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_started = psutil.Process(dead.pid).create_time()
    dead.wait()
    note = SupervisorNote("job-x", 1, dead.pid, dead_started, psutil.boot_time(), "none")
    path = note_path(data, "job-x", 1)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(asdict(note)))

    stop_orphans(data)

    assert not (run_dir / "tmp").exists() and not (run_dir / "var-tmp").exists()
    for name in ("home", "logs"):
        assert (run_dir / name / "left.txt").stat().st_uid == os.getuid()
