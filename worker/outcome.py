"""Why an attempt ended, from what its processes left behind: exit codes, torchrun's failure
summary, the ranks' error records and the tails of their logs.

The failing rank is the one that failed first: a rank killed by a signal torchrun does not send
itself (it only SIGTERMs the others once one has failed) and that is not SIGABRT, else the
Python error recorded by `rank_main.py` that names a cause (out of memory), else the earliest
one, else torchrun's own "root cause" (which may be a rank that died of SIGABRT). SIGABRT ranks low
because it is mostly a symptom: NCCL's watchdog aborts a rank whose collective waited in vain
for a peer that failed, and gloo's threads sometimes abort at exit after the error was recorded.
"""

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from jobs.contract import rank_files
from jobs.contract.rank_files import ErrorRecord, read_error_records
from jobs.states import ExitReason, JobState
from worker.launch import RunPaths

TAIL_LINES = 20
MAX_MESSAGE_CHARS = 8000
# Exit of a rank that ran out of memory: the OOM killer's SIGKILL, or the error of torch
# (torch.OutOfMemoryError, or AcceleratorError "CUDA error: out of memory" from a kernel
# launch, "CUDA driver error: out of memory" from the driver API), NCCL ("Cuda failure 'out of
# memory'", "Cuda failure 2 'out of memory'"), cuBLAS, cuDNN or Python.
OOM_ERROR = re.compile(
    r"CUDA out of memory|CUDA (?:driver )?error: out of memory|OutOfMemoryError|\bMemoryError\b"
    r"|Cuda failure (?:\d+ )?'out of memory'|CUBLAS_STATUS_ALLOC_FAILED"
    r"|CUDNN_STATUS_NOT_ENOUGH_MEMORY|CUDNN_STATUS_ALLOC_FAILED"
)
OOM_KILL_TEXT = re.compile(r"\bKilled\b|[Oo]ut of memory")
# The error of a program that needs CUDA (or NCCL, which needs it) where there is none: a CPU
# build of torch (`torch._C` has no `_cuda_setDevice`, "not compiled with CUDA", no NCCL built
# in), a CUDA build without a GPU or driver, or the program's own check for GPUs.
CUDA_NEEDED = re.compile(
    r"torch\._C' has no attribute '_cuda|Torch not compiled with CUDA enabled"
    r"|Found no NVIDIA driver|No CUDA GPUs are available|no CUDA-capable device"
    r"|CUDA driver initialization failed|torch\.cuda\.is_available\(\) is False"
    r"|ProcessGroupNCCL|NCCL built in|\bNCCL\b.*not available|\bGPUs?\b"
)
NO_CUDA_HINT = (
    "the program needs {what}, but this worker has no CUDA (it runs jobs on CPU): submit it "
    "to a queue whose workers have GPUs, or let it run on CPU (device 'cpu' where "
    "torch.cuda.is_available() is False, backend 'gloo')"
)
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_ROOT_CAUSE = "Root Cause (first observed failure):"


@dataclass(frozen=True)
class Outcome:
    state: JobState
    reason: ExitReason
    exit_code: int | None
    message: str | None
    # What went wrong without failing the attempt (`worker.outcome_warnings`).
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankFailure:
    rank: int
    exit_code: int


def read_tail(path: Path, max_bytes: int = 256 * 1024) -> str:
    """The end of a text file ('' when there is none)."""
    try:
        with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_lines(text: str, count: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-count:])


def parse_torchrun_failures(text: str) -> tuple[RankFailure | None, list[RankFailure]]:
    """(root cause, every failure) from the last ChildFailedError summary torchrun printed."""
    at = text.rfind(_ROOT_CAUSE)
    if at == -1:
        return None, []
    start = text.rfind("Failures:", 0, at)
    others = [RankFailure(int(r), int(c)) for r, c in _FAILURE.findall(text, max(start, 0), at)]
    roots = [RankFailure(int(r), int(c)) for r, c in _FAILURE.findall(text, at)]
    root = roots[0] if roots else None
    return root, ([root] if root else []) + others


def is_oom_error(text: str) -> bool:
    return OOM_ERROR.search(text) is not None


def find_failing_rank(launcher_text: str, records: dict[int, ErrorRecord]) -> RankFailure | None:
    root, failures = parse_torchrun_failures(launcher_text)
    codes = {f.rank: f.exit_code for f in failures}
    symptoms = (-signal.SIGTERM, -signal.SIGABRT)
    killed = [f for f in failures if f.exit_code < 0 and f.exit_code not in symptoms]
    if killed:
        return root if root in killed else killed[0]
    if records:
        # A record that names the cause beats an earlier one that names its consequence
        # (a peer's broken collective), then the earliest wins.
        first = min(records.values(), key=lambda r: (not is_oom_error(r.error), r.ts))
        return RankFailure(first.rank, codes.get(first.rank, first.exit_code))
    return root


def _describe_code(code: int) -> str:
    if code < 0:
        try:
            return f"exit code {code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"exit code {code}"
    return f"exit code {code}"


def _clip(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return message[:200] + "\n...\n" + message[-(MAX_MESSAGE_CHARS - 210) :]


ABORTS = (-signal.SIGABRT, 128 + signal.SIGABRT)
# How torchrun ends the ranks still alive once one has failed.
STOPPED_BY_LAUNCHER = (-signal.SIGTERM, 128 + signal.SIGTERM, -signal.SIGKILL, 128 + signal.SIGKILL)
PORT_IN_USE = re.compile(r"EADDRINUSE|[Aa]ddress already in use")
PORT_IN_USE_HINT = (
    "hint: the port was taken by another process on this worker, likely another job's: a "
    "program that sets MASTER_PORT itself (os.environ['MASTER_PORT'] = '12355', as the "
    "mp.spawn tutorials do) collides with every other job doing the same. Keep the port "
    "Launchbay gives each job: os.environ.setdefault('MASTER_PORT', '12355'), or no "
    "assignment at all"
)


def aborted_after_finishing(launcher_text: str, log_dir: Path, restart: int) -> bool:
    """Whether a rank died of SIGABRT, every other failed rank was stopped by torchrun after
    it, and every rank had finished before (its ``rank-<n>.finished`` of this restart, left by
    the rank entry when the program returned or by the SDK's `distributed()` when it was
    left): the abort at interpreter exit that torch + gloo sometimes show, after the program
    finished."""
    _, failures = parse_torchrun_failures(launcher_text)
    codes = {f.exit_code for f in failures}
    if not codes & set(ABORTS) or not codes <= {*ABORTS, *STOPPED_BY_LAUNCHER}:
        return False
    try:
        ranks = rank_files.LOG.ranks_in(os.listdir(log_dir))
    except OSError:
        return False
    if not ranks:
        return False
    for rank in ranks:
        try:
            if rank_files.read_finished(log_dir, rank) != restart:
                return False
        except (OSError, ValueError):
            return False
    return True


def needs_cuda(text: str) -> str | None:
    """What a failure's text shows the program needed and did not find ("CUDA", "CUDA and
    NCCL"), or None."""
    if CUDA_NEEDED.search(text) is None:
        return None
    return "CUDA and NCCL" if "NCCL" in text.upper() else "CUDA"


def classify_exit(
    returncode: int,
    *,
    paths: RunPaths,
    launcher: str,
    ranks_started: bool,
    restart: int = 0,
    oom_killed: bool = False,
    cuda_available: bool = True,
) -> Outcome:
    """The outcome of an attempt whose launcher exited by itself with `returncode`; on a worker
    without CUDA (not `cuda_available`), a failure of a program that needs it says so first."""
    if returncode == 0:
        return Outcome(JobState.SUCCEEDED, ExitReason.COMPLETED, 0, None)
    launcher_text = read_tail(paths.launcher_log)
    records = read_error_records(paths.log_dir, restart)
    if launcher == "python":
        failure: RankFailure | None = RankFailure(0, returncode)
    else:
        failure = find_failing_rank(launcher_text, records)
    if failure is None:
        reason = ExitReason.USER_ERROR if ranks_started else ExitReason.LAUNCH_ERROR
        if "RendezvousTimeoutError" in launcher_text:
            reason = ExitReason.RENDEZVOUS_TIMEOUT
        message = f"{launcher} exited with {_describe_code(returncode)}"
        tail = last_lines(launcher_text)
        return Outcome(JobState.FAILED, reason, returncode, _clip(f"{message}\n{tail}".strip()))

    if launcher == "torchrun" and aborted_after_finishing(launcher_text, paths.log_dir, restart):
        return Outcome(
            JobState.SUCCEEDED,
            ExitReason.COMPLETED,
            0,
            f"warning: rank {failure.rank} was aborted (SIGABRT) at interpreter exit, after "
            "every rank had finished its program; a known torch + gloo "
            "abort at exit: the job's results are complete",
        )
    record = records.get(failure.rank)
    rank_tail = last_lines(read_tail(paths.rank_log(failure.rank)))
    head = f"rank {failure.rank} failed ({_describe_code(failure.exit_code)})"
    if record is not None and record.error:
        message = f"{head}: {record.error}\n{last_lines(record.traceback) or rank_tail}"
    else:
        message = f"{head}\n{rank_tail}"
    if PORT_IN_USE.search(message):
        message = f"{message}\n{PORT_IN_USE_HINT}"
    needed = None if cuda_available else needs_cuda(record.error if record else rank_tail)
    if needed is not None:
        message = f"{NO_CUDA_HINT.format(what=needed)}\n{message}"
    oom = is_oom_error(record.error if record else rank_tail)
    if failure.exit_code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        oom = oom or oom_killed or bool(OOM_KILL_TEXT.search(rank_tail + launcher_text[-4096:]))
    reason = ExitReason.OOM if oom else ExitReason.USER_ERROR
    return Outcome(JobState.FAILED, reason, failure.exit_code, _clip(message.strip()))


def _oom_counter_file() -> Path | None:
    """The memory cgroup file that counts OOM kills in this process's cgroup (v2, then v1)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidate = Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.events"
        elif "memory" in controllers.split(","):
            candidate = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.oom_control"
        else:
            continue
        if candidate.exists():
            return candidate
    return None


def read_oom_kills() -> int | None:
    """How many processes the kernel has OOM-killed in our cgroup so far (None: unknown)."""
    file = _oom_counter_file()
    if file is None:
        return None
    try:
        for line in file.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None
