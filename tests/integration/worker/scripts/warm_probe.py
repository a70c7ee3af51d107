"""What a rank is, as a cold start (torchrun) and a warm one (the fork server) must both give it,
and what a hostile rank reaches of the fork server and of the job before it. Each rank writes
probe-<RANK>.json to $LAUNCHBAY_OUTPUT_DIR."""

import ctypes
import json
import os
import resource
import socket
import sys
from pathlib import Path

import torch

import __main__

CUDA_AT_START = torch.cuda.is_initialized()
JOB = os.environ["LAUNCHBAY_JOB_ID"]


def attempt(action) -> str:  # type: ignore[no-untyped-def]
    try:
        action()
        return "done"
    except OSError as exc:
        return type(exc).__name__


def read(path: str) -> None:
    with open(path, "rb") as handle:
        handle.read(1)


def ptrace_attach(pid: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
        return "attached"
    return os.strerror(ctypes.get_errno())


def connect(path: str) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(path)


block = Path("/proc/self/environ").read_bytes().split(b"\0")
report = {
    "env": dict(os.environ),
    "environ_block": sorted(e.decode() for e in block if e)
    == sorted(f"{k}={v}" for k, v in os.environ.items()),
    "cmdline": Path("/proc/self/cmdline").read_bytes().decode().split("\0")[:-1],
    "cwd": os.getcwd(),
    "umask": os.umask(0o022),
    "rlimits": {
        n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT")
    },
    "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
    "session_leader": os.getsid(0) == os.getpid(),
    "stdin": os.readlink("/proc/self/fd/0"),
    "stdout": os.readlink("/proc/self/fd/1"),
    "argv": sys.argv,
    "path": sys.path,
    "flags": [sys.flags.isolated, sys.flags.safe_path, sys.flags.no_user_site],
    "main": [__name__, __main__.__file__],
    "threads": torch.get_num_threads(),
    "cuda_at_start": CUDA_AT_START,
    "cuda_now": torch.cuda.is_initialized(),
    "left_by_last_job": [
        getattr(torch, "_probe_mark", None),
        [n for n in os.listdir("/dev/shm") if n.startswith("probe-") and JOB not in n],
        os.environ.get("PROBE_MARK"),
    ],
}
server = os.environ.get("PROBE_SERVER_PID")
if server:
    report["server_mem"] = attempt(lambda: read(f"/proc/{server}/mem"))
    report["server_environ"] = attempt(lambda: read(f"/proc/{server}/environ"))
    report["server_ptrace"] = ptrace_attach(int(server))
    report["server_socket"] = attempt(lambda: connect(os.environ["PROBE_SOCKET"]))
torch._probe_mark = os.environ["LAUNCHBAY_JOB_ID"]  # type: ignore[attr-defined]
Path(f"/dev/shm/probe-{JOB}-{os.environ['RANK']}").write_text("left")
os.environ["PROBE_MARK"] = "left"
out = Path(os.environ["LAUNCHBAY_OUTPUT_DIR"]) / f"probe-{os.environ['RANK']}.json"
out.write_text(json.dumps(report))
