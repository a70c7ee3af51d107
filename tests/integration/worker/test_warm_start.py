"""Warm starts against the cold path, with real job users, a real fork server and real torchrun:
a rank started warm is what torchrun would have made it, and reaches nothing of the fork server
or of the job that ran before it."""

import json
import os
import pwd
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.worker.conftest import WorkerEnv
from worker.isolation import can_switch_users
from worker.process_tree import ProcessTree

pytestmark = pytest.mark.skipif(not can_switch_users(), reason="job users need a root worker")

# What differs between any two runs, warm or cold: the ports and the launcher's PID.
PER_RUN = {"MASTER_PORT", "LAUNCHBAY_LAUNCHER_PID"}


def probes(env: WorkerEnv, job_id: str) -> dict[int, dict[str, Any]]:
    out = env.settings.data_dir.resolve() / "artifacts" / job_id
    return {rank: json.loads((out / f"probe-{rank}.json").read_text()) for rank in (0, 1)}


def run_probe(worker: WorkerEnv, **spec: Any) -> tuple[str, dict[int, dict[str, Any]]]:
    job_id = worker.submit("warm_probe.py", **spec)
    worker.run(job_id)
    job = worker.job(job_id)
    assert job.state == "succeeded", job.message
    return job_id, probes(worker, job_id)


def normalised(report: dict[str, Any], job_id: str, user: str) -> dict[str, Any]:
    """The report with the job's id and user spelled alike, the per-run values dropped, and
    torchrun's error file's random run suffix kept out."""
    text = json.dumps(report).replace(job_id, "<job>").replace(user, "<user>")
    text = re.sub(r"<job>-1_[A-Za-z0-9_]+/attempt_", "<job>-1_<run>/attempt_", text)
    found = json.loads(text)
    for name in PER_RUN:
        found["env"].pop(name)
    # Each attempt leases whichever job user is free: its own ids, no other group.
    entry = pwd.getpwnam(user)
    assert found.pop("ids") == [entry.pw_uid, entry.pw_uid, entry.pw_gid, entry.pw_gid, []]
    return found


def test_a_warm_rank_is_what_torchrun_makes_it(wenv: WorkerEnv) -> None:
    cold_id, cold = run_probe(wenv, launcher="torchrun")
    warm_id, warm = run_probe(wenv)

    assert wenv.job(cold_id).launch_path == "cold"
    assert wenv.job(warm_id).launch_path == "warm"
    for rank in (0, 1):
        assert cold[rank]["env"]["RANK"] == warm[rank]["env"]["RANK"] == str(rank)
        a = normalised(cold[rank], cold_id, cold[rank]["env"]["USER"])
        b = normalised(warm[rank], warm_id, warm[rank]["env"]["USER"])
        a.pop("cmdline"), b.pop("cmdline")  # torchrun's rank runs `python -I rank_main.py`, too
        # torchrun shares its rendezvous store with the ranks (a job without restarts); the
        # warm launcher has none to share, so rank 0 hosts the process group's.
        assert a["env"].pop("TORCHELASTIC_USE_AGENT_STORE") == "True"
        assert b["env"].pop("TORCHELASTIC_USE_AGENT_STORE") == "False"
        assert a == b
        assert warm[rank]["environ_block"] is True  # /proc/<pid>/environ says its own
        assert warm[rank]["cmdline"][3].endswith("rank_main.py")
        assert warm[rank]["cuda_at_start"] is False
        assert warm[rank]["ids"][0] not in (0, os.getuid())  # a job user
        assert warm[rank]["session_leader"] and warm[rank]["stdin"] == "/dev/null"


def server_files(env: WorkerEnv) -> tuple[dict[str, Any], Path]:
    assert env.warm_pool is not None
    ready = sorted(env.warm_pool.directory.glob("*.json"), key=lambda p: p.stat().st_mtime)[-1]
    return json.loads(ready.read_text()), ready.with_suffix(".sock")


def test_a_warm_rank_reaches_nothing_of_the_fork_server_nor_of_the_job_before(
    wenv: WorkerEnv,
) -> None:
    first, before = run_probe(wenv)
    assert before[0]["left_by_last_job"] == [None, [], None]
    info, sock = server_files(wenv)
    assert info["cuda_initialized"] is False
    env = {"PROBE_SERVER_PID": str(info["pid"]), "PROBE_SOCKET": str(sock)}
    second, after = run_probe(wenv, env=env)

    assert wenv.job(second).launch_path == "warm"
    for report in after.values():
        assert report["left_by_last_job"] == [None, [], None]  # a global, /dev/shm, env
        assert report["server_mem"] == "PermissionError"
        assert report["server_environ"] == "PermissionError"
        assert report["server_ptrace"] == "Operation not permitted"
        assert report["server_socket"] in ("PermissionError", "FileNotFoundError")


def test_the_fork_server_answers_no_other_uid(wenv: WorkerEnv) -> None:
    run_probe(wenv)
    _, sock = server_files(wenv)
    directory = sock.parent
    mode = directory.stat().st_mode
    directory.chmod(0o711)
    sock.chmod(0o666)
    try:
        reader, writer = os.pipe()
        through = os.open(directory, os.O_PATH)  # the directories above are not nobody's
        pid = os.fork()
        if pid == 0:  # as nobody, who now reaches the socket: the server must not fork for it
            try:
                os.setgid(65534)
                os.setuid(65534)
                with socket.socket(socket.AF_UNIX) as conn:
                    conn.settimeout(5)
                    conn.connect(f"/proc/self/fd/{through}/{sock.name}")
                    os.write(writer, conn.recv(100) or b"closed")
            except BaseException as exc:
                os.write(writer, repr(exc).encode())
            finally:
                os._exit(0)
        os.close(writer)
        os.close(through)
        assert os.read(reader, 200) == b"closed"
        os.waitpid(pid, 0)
    finally:
        directory.chmod(mode & 0o777)
        sock.chmod(0o600)


def test_a_warm_rank_ends_as_its_interpreter_would(wenv: WorkerEnv) -> None:
    """A warm rank leaves without tearing the fork server's modules down (torch's teardown
    costs a rank ~0.4 s), yet does what the interpreter's exit does that a program sees."""
    done = wenv.submit("exit_probe.py")
    wenv.run(done)
    info, _ = server_files(wenv)
    # One rank: of two, the other would be stopped as this one fails, as torchrun does.
    failed = wenv.submit("exit_probe.py", nproc_per_node=1, env={"EXIT_PROBE_CODE": "3"})
    wenv.run(failed)

    assert wenv.job(done).launch_path == wenv.job(failed).launch_path == "warm"
    assert wenv.job(done).state == "succeeded", wenv.job(done).message
    for job_id, ranks in ((done, (0, 1)), (failed, (0,))):
        out = wenv.settings.data_dir.resolve() / "artifacts" / job_id
        for rank in ranks:
            assert (out / f"unclosed-{rank}.txt").read_text() == f"rank {rank} sum 3\n"
            assert (out / f"atexit-{rank}.txt").read_text() == "ran"
            assert (out / f"finalize-{rank}.txt").read_text() == "ran"
            assert (out / f"thread-{rank}.txt").read_text().startswith("written after")
    job = wenv.job(failed)
    assert (job.state, job.exit_reason) == ("failed", "user_error"), job.message
    assert job.exit_code == 3 and "exit code 3" in (job.message or ""), job.message
    # Both attempts were forked from one server: no attempt's supervisor stopped it.
    assert server_files(wenv)[0]["pid"] == info["pid"]
    os.kill(info["pid"], 0)


def test_ranks_that_end_at_once_are_recorded_however_late_the_supervisor_reads(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm launcher announces its ranks; those that end before the supervisor has recorded
    them stay unreaped (still its children, in their sessions) until it has, so a loaded
    supervisor records them still, and its sweep knows their sessions."""
    record = ProcessTree._record_announced

    def late(tree: ProcessTree) -> None:
        if any(p not in tree._announced for p in getattr(tree.popen, "announced", ())):
            time.sleep(1.0)  # the ranks below end within it
        record(tree)

    monkeypatch.setattr(ProcessTree, "_record_announced", late)
    job_id = wenv.submit("single.py", nproc_per_node=2)
    result = wenv.run(job_id)

    job = wenv.job(job_id)
    assert (job.state, job.launch_path) == ("succeeded", "warm"), job.message
    # The launcher and its two ranks, each in a session of its own.
    assert len(result.processes) == 3, result.processes
    assert all(process.sid == process.pid for process in result.processes)
