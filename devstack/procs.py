"""Starting and stopping processes, and finding the ones the test session left behind."""

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

# Every process the tests start inherits this variable, so leftovers can be found even
# after they were re-parented (torchrun's ranks live in their own sessions).
SESSION_MARKER = "LAUNCHBAY_TEST_SESSION"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def start(
    argv: Sequence[str], env: dict[str, str], log_path: Path, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    log_file = open(log_path, "ab")  # noqa: SIM115 - closed with the process by stop()
    return subprocess.Popen(
        list(argv),
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left of it."""
    stop_all([proc], timeout)


def stop_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float = 20.0) -> None:
    """`stop` for each of `procs`, SIGTERMed together (once: a second SIGTERM is a forced stop
    to some, RQ's worker among them): their shutdowns overlap, and what is left of each is
    SIGKILLed `timeout` seconds after all were asked, not after the one before it."""
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(5)


def marked_processes(marker: str) -> list[psutil.Process]:
    """Live processes (not zombies) that carry this session's marker, other than ourselves."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.info["pid"] == me or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get(SESSION_MARKER) == marker:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def job_processes(*job_ids: str) -> list[psutil.Process]:
    """Live processes started for these jobs (every rank carries LAUNCHBAY_JOB_ID)."""
    wanted = set(job_ids)
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if proc.environ().get("LAUNCHBAY_JOB_ID") in wanted:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found
