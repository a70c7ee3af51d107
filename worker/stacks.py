"""Hang forensics: every rank's Python stack, read with py-spy, read as a whole.

py-spy (`py-spy dump --pid PID`) reads a process's Python stack from outside it, through
ptrace: the worker needs the right to trace its jobs' processes (it runs as root, or with
CAP_SYS_PTRACE in a container: docs/reliability.md, "Hang forensics"). The ranks are the
processes of the job that run `rank_main.py` (a DataLoader worker forked from one is not
another rank); each one's `RANK` is read from its environment.

A rank is "in a collective" when a frame of its stack is a torch.distributed collective, a
c10d call, or a wait on one (`COLLECTIVE_FRAME`). With CUDA, PyTorch's NCCL flight recorder
(`worker.launch.flight_recorder_env`) dumps its ring of collectives on a NCCL timeout; the
dump files found in the attempt's log directory are named with the stacks.
"""

import logging
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import Engine

from jobs.contract import rank_files
from jobs.states import AttemptRef
from service.db import session_scope
from service.records import NewRankStack, record_stacks
from worker.launch import FLIGHT_RECORDER_PREFIX

log = logging.getLogger(__name__)

PY_SPY_TIMEOUT_S = 20.0
RANK_MAIN = "rank_main.py"
LAUNCHER_MODULE = b"torch.distributed.run"
# torch.distributed's collectives and point-to-point calls, and the waits on their work.
COLLECTIVES = (
    "all_reduce|all_gather|all_gather_into_tensor|all_gather_object|reduce_scatter|"
    "reduce_scatter_tensor|all_to_all|all_to_all_single|broadcast|broadcast_object_list|"
    "barrier|monitored_barrier|reduce|gather|gather_object|scatter|scatter_object_list|"
    "send|recv|isend|irecv|batch_isend_irecv|wait|_wait|wait_tensor"
)
# A py-spy frame line: `    function (file:line)`.
COLLECTIVE_FRAME = re.compile(
    rf"^\s+(?:{COLLECTIVES}) \((?:[^)]*torch/distributed/[^)]*|[^)]*c10d[^)]*)\)",
    re.MULTILINE,
)


def in_collective(stack: str) -> bool:
    return COLLECTIVE_FRAME.search(stack) is not None


@dataclass(frozen=True)
class RankStackDump:
    rank: int
    pid: int
    stack: str
    in_collective: bool
    last_output_ts: float | None


def py_spy_path() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _read_proc(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _rank_of(pid: int) -> int | None:
    """The process's RANK when it is a rank's own process (runs rank_main.py), else None."""
    args = _read_proc(pid, "cmdline").split(b"\0")
    runs_rank_main = any(arg.endswith(RANK_MAIN.encode()) for arg in args)
    # torchrun names rank_main.py in its own command line (the program it starts).
    if not runs_rank_main or LAUNCHER_MODULE in args:
        return None
    for item in _read_proc(pid, "environ").split(b"\0"):
        if item.startswith(b"RANK="):
            value = item[5:].decode(errors="replace")
            return int(value) if value.isdigit() else None
    return 0  # the `python` launcher: one process, rank 0


def _parent(pid: int) -> int | None:
    stat = _read_proc(pid, "stat").decode(errors="replace")
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def find_rank_processes(pids: list[int]) -> dict[int, int]:
    """{rank: pid} among `pids` (a rank's forked children carry its RANK too: the one whose
    parent is not a rank of the same number is the rank)."""
    ranks = {pid: _rank_of(pid) for pid in pids}
    found: dict[int, int] = {}
    for pid, rank in sorted(ranks.items()):
        if rank is None:
            continue
        parent = _parent(pid)
        if parent is not None and ranks.get(parent) == rank:
            continue
        found.setdefault(rank, pid)
    return found


def dump_python_stack(pid: int, py_spy: str | None) -> str:
    """The process's Python stack from py-spy (every thread), or why there is none."""
    if py_spy is None:
        return "py-spy is not installed on this worker: no stack"
    try:
        done = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=PY_SPY_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"py-spy did not answer within {PY_SPY_TIMEOUT_S:g} s"
    except OSError as exc:
        return f"cannot run py-spy: {exc}"
    if done.returncode != 0:
        reason = (done.stderr or done.stdout).strip()
        return f"py-spy failed (exit {done.returncode}): {reason}"
    return done.stdout


def flight_recorder_dumps(log_dir: Path) -> dict[int, Path]:
    """{rank: dump file} of the NCCL flight recorder in the attempt's log directory."""
    found: dict[int, Path] = {}
    for path in log_dir.glob(f"{FLIGHT_RECORDER_PREFIX}*"):
        suffix = path.name.removeprefix(FLIGHT_RECORDER_PREFIX)
        if suffix.isdigit():
            found[int(suffix)] = path
    return found


def last_output_ts(log_dir: Path, rank: int) -> float | None:
    """When the rank last wrote to its log; None while it has written nothing (its log is
    made empty when it starts: that time says nothing of its progress) or has no log."""
    try:
        written = rank_files.LOG.path(log_dir, rank).stat()
    except OSError:
        return None
    return written.st_mtime if written.st_size > 0 else None


def capture_stacks(pids: list[int], log_dir: Path) -> list[RankStackDump]:
    """Every rank's stack now, with when the rank last wrote to its log (its progress)."""
    py_spy = py_spy_path()
    recorder = flight_recorder_dumps(log_dir)
    dumps = []
    for rank, pid in sorted(find_rank_processes(pids).items()):
        stack = dump_python_stack(pid, py_spy)
        if rank in recorder:
            size = recorder[rank].stat().st_size
            stack += f"\nNCCL flight recorder dump: {recorder[rank]} ({size} bytes)\n"
        last_output = last_output_ts(log_dir, rank)
        dumps.append(RankStackDump(rank, pid, stack, in_collective(stack), last_output))
    if not dumps:
        log.info("no rank process found among %d processes", len(pids))
    return dumps


def record_rank_stacks(
    engine: Engine, ref: AttemptRef, node: int, pids: list[int], log_dir: Path, reason: str
) -> None:
    """Capture every rank's stack among `pids` and store the capture with the job."""
    dumps = capture_stacks(pids, log_dir)
    stacks = [NewRankStack(d.rank, d.stack, d.in_collective, d.last_output_ts) for d in dumps]
    log.info("%s: recorded %d ranks' stacks (%s)", ref, len(stacks), reason)
    with session_scope(engine) as session:
        record_stacks(
            session,
            ref.job_id,
            ref.attempt,
            node=node,
            ts=time.time(),
            reason=reason,
            stacks=stacks,
        )
