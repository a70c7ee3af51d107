"""A warm launcher is forked by the fork server and calls `setsid` only once it runs: seen
before that, it is in the server's session. The sweep after it ends stops what is left in its
recorded sessions, and must not take the fork server, its parent, for one of the job's; nor
may the record say the server's session is the job's."""

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil

from tests.support.procs import wait_until
from worker.process_table import proc_stat
from worker.process_tree import ProcessTree, stop_job_processes
from worker.warm_start import MAX_ANNOUNCED, MAX_ANSWERS, WarmProcess


def forks_a_late_leaver(then: str) -> str:
    """A program that forks a child, prints its PID and waits: the child stays in its parent's
    session for 0.8 s, calls `setsid`, then runs `then` (a statement)."""
    return textwrap.dedent(
        f"""
        import os, time
        pid = os.fork()
        if pid == 0:  # in its parent's session until it leaves it
            time.sleep(0.8)
            os.setsid()
            {then}
        print(pid, flush=True)
        time.sleep(60)
        """
    )


# A fork server, and the warm launcher it forked, which ends soon after its `setsid`.
SERVER = forks_a_late_leaver("time.sleep(0.2); os._exit(0)")


class ForkedLauncher:
    """The server's child, as `ProcessTree` watches a warm launcher: ended once it is gone."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        return None if proc_stat(self.pid) is not None else 0


def test_the_sweep_after_a_warm_launcher_leaves_its_fork_server_running() -> None:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert server.stdout is not None
        launcher = ForkedLauncher(int(server.stdout.readline()))
        tree = ProcessTree(launcher, server_pid=server.pid)
        assert launcher.pid not in tree.records  # not while it is in the server's session
        assert wait_until(lambda: launcher.poll() is not None, timeout=10)
        assert stop_job_processes(tree, grace_s=1.0) == []
        assert server.poll() is None, "the sweep stopped the fork server"
    finally:
        server.kill()
        server.wait()


def test_a_poll_wait_ends_when_the_launcher_does() -> None:
    """The supervisor sees its launcher's end at once, not at its next poll."""
    launcher = subprocess.Popen(["sleep", "0.3"], start_new_session=True)
    tree = ProcessTree(launcher)
    began = time.monotonic()
    tree.wait(60.0)
    assert time.monotonic() - began < 30, "waited for the timeout, not for the launcher"
    assert tree.returncode() == 0
    tree.wait(0.01)  # ended: returns


class AnnouncingLauncher:
    """A launcher that says which ranks it forked, as a warm one does: here it also names a
    process that is not its child, as a launcher running as a hostile job user could."""

    def __init__(self, popen: subprocess.Popen[bytes], announced: list[int]) -> None:
        self.pid, self.popen, self.announced = popen.pid, popen, announced

    def poll(self) -> int | None:
        return self.popen.poll()


def test_only_the_launchers_own_children_are_recorded_from_its_word() -> None:
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, time; "
         "subprocess.Popen(['sleep', '60'], start_new_session=True); "
         "time.sleep(60)"],
        start_new_session=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: psutil.Process(launcher.pid).children(), timeout=10)
        [rank] = psutil.Process(launcher.pid).children()
        tree = ProcessTree(AnnouncingLauncher(launcher, []))
        tree.popen.announced.extend([rank.pid, bystander.pid, os.getppid()])  # type: ignore[attr-defined]
        tree.wait(0.01)
        tree.poll()
        assert rank.pid in tree.records
        assert bystander.pid not in tree.records and os.getppid() not in tree.records
        assert stop_job_processes(tree, grace_s=1.0) == []
        assert bystander.poll() is None, "a process the launcher named but never forked"
    finally:
        for proc in (bystander, launcher):
            proc.kill()
            proc.wait()


# A warm launcher, and the rank it forked, which runs on after its `setsid`.
RANK_BEFORE_SETSID = forks_a_late_leaver("time.sleep(60)")


def test_a_warm_rank_is_recorded_in_its_own_session_not_its_launchers() -> None:
    """A warm rank calls `setsid` once forked; a poll that sees it before that leaves it for a
    later one, or its record would name the launcher's session as the rank's."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", RANK_BEFORE_SETSID], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert launcher.stdout is not None
        rank = int(launcher.stdout.readline())
        told: list[int] = []
        announcing = AnnouncingLauncher(launcher, [rank])
        announcing.recorded = lambda: told.append(rank)  # type: ignore[attr-defined]
        tree = ProcessTree(announcing)
        assert launcher.pid in tree.records and rank not in tree.records
        assert told == [], "told to reap a rank not recorded"
        assert wait_until(lambda: os.getsid(rank) == rank, timeout=10)
        tree.poll()
        assert (tree.records[rank].sid, tree.records[rank].pgid) == (rank, rank)
        assert told == [rank]
        assert stop_job_processes(tree, grace_s=1.0) == []
    finally:
        launcher.kill()
        launcher.wait()


def test_a_warm_launchers_malformed_lines_are_ignored() -> None:
    server, supervisor = socket.socketpair()
    try:
        watched = WarmProcess(supervisor, os.getpid(), b"")
        server.sendall(b'not json\n["a list"]\n{"ranks": ["12", -1, 1, true, 4321]}\n')
        server.sendall(b'{"exit": "zero"}\n{"ranks": 7}\n')
        assert watched.poll() is None
        assert watched.announced == [4321]
        server.sendall(b'{"exit": 3}\n')
        assert watched.poll() == 3
    finally:
        server.close()
        supervisor.close()


def test_a_flood_of_announcements_adds_bounded_work() -> None:
    """A launcher runs as the job user: however much it announces, the supervisor looks up a
    bounded number of PIDs and answers with a bounded number of lines."""
    server, supervisor = socket.socketpair()
    try:
        watched = WarmProcess(supervisor, os.getpid(), b"")
        flood = b"".join(b'{"ranks": [%d, %d]}\n' % (n, n + 1) for n in range(2, 20_000, 2))
        sender = threading.Thread(target=server.sendall, args=(flood,))
        sender.start()
        while sender.is_alive():
            watched.poll()
        sender.join()
        watched.poll()
        assert len(watched.announced) == MAX_ANNOUNCED
        watched.recorded()
        server.setblocking(False)
        assert server.recv(1 << 20) == b"recorded\n" * MAX_ANSWERS
        assert watched.unanswered == 0
    finally:
        server.close()
        supervisor.close()
