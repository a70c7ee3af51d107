"""Naming the failing rank from torchrun's summary and the ranks' error records."""

import json
from pathlib import Path

import pytest

from jobs.states import ExitReason, JobState
from worker.launch import RunPaths
from worker.outcome import (
    ErrorRecord,
    RankFailure,
    classify_exit,
    find_failing_rank,
    parse_torchrun_failures,
)

SUMMARY = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/w/rank_main.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_05:49:05
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 13071)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 13071
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_05:49:05
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 13072)
  error_file: /x/error.json
  traceback : Traceback (most recent call last):
============================================================
"""


def record(rank: int, ts: float, error: str = "RuntimeError: boom") -> ErrorRecord:
    return ErrorRecord(rank=rank, exit_code=1, error=error, traceback="", ts=ts)


def test_torchrun_summary() -> None:
    root, failures = parse_torchrun_failures(SUMMARY)
    assert root == RankFailure(1, 1)
    assert failures == [RankFailure(1, 1), RankFailure(0, -15)]
    assert parse_torchrun_failures("no summary here") == (None, [])


def test_the_first_python_error_wins_over_torchruns_guess() -> None:
    # torchrun's timestamps are whole seconds; the records' are not
    tied = SUMMARY.replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)", 1)
    records = {0: record(0, 10.7), 1: record(1, 10.2)}
    assert find_failing_rank(tied, records) == RankFailure(1, 1)


def test_a_rank_killed_by_a_signal_is_the_cause() -> None:
    text = SUMMARY.replace("exitcode  : -15 (pid: 13071)", "exitcode  : -9 (pid: 13071)")
    assert find_failing_rank(text, {1: record(1, 1.0)}) == RankFailure(0, -9)


def test_without_records_torchruns_root_cause() -> None:
    assert find_failing_rank(SUMMARY, {}) == RankFailure(1, 1)
    assert find_failing_rank("", {}) is None


def write_failure(paths: RunPaths, rank: int, error: str, log: str) -> None:
    paths.log_dir.mkdir(parents=True)
    paths.launcher_log.write_text(SUMMARY.replace("rank      : 1", f"rank      : {rank}"))
    paths.rank_log(rank).write_text(log)
    data = {"rank": rank, "exit_code": 1, "error": error, "traceback": log, "ts": 1.0}
    (paths.log_dir / f"rank-{rank}.error.json").write_text(json.dumps(data))


def test_user_error_message(tmp_path: Path) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    trace = 'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: bad\n'
    write_failure(paths, 1, "ValueError: bad", trace)
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (outcome.state, outcome.reason, outcome.exit_code) == (
        JobState.FAILED,
        ExitReason.USER_ERROR,
        1,
    )
    assert outcome.message == f"rank 1 failed (exit code 1): ValueError: bad\n{trace.strip()}"


def test_out_of_memory(tmp_path: Path) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    error = "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    write_failure(paths, 0, error, error)
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert outcome.reason == ExitReason.OOM


def test_sigkill_is_oom_only_with_a_sign(tmp_path: Path) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    paths.log_dir.mkdir(parents=True)
    paths.launcher_log.write_text(SUMMARY.replace("exitcode  : -15", "exitcode  : -9"))
    plain = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (plain.reason, plain.exit_code) == (ExitReason.USER_ERROR, -9)
    assert plain.message is not None and plain.message.startswith(
        "rank 0 failed (exit code -9, SIGKILL)"
    )
    oom = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True, oom_killed=True)
    assert oom.reason == ExitReason.OOM


def test_launcher_failing_before_the_ranks(tmp_path: Path) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    paths.log_dir.mkdir(parents=True)
    paths.launcher_log.write_text("ModuleNotFoundError: No module named 'torch'\n")
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=False)
    assert (outcome.reason, outcome.exit_code) == (ExitReason.LAUNCH_ERROR, 1)
    assert outcome.message == (
        "torchrun exited with exit code 1\nModuleNotFoundError: No module named 'torch'"
    )
    paths.launcher_log.write_text("torch...RendezvousTimeoutError: timed out\n")
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=False)
    assert outcome.reason == ExitReason.RENDEZVOUS_TIMEOUT


def test_success(tmp_path: Path) -> None:
    outcome = classify_exit(
        0, paths=RunPaths.for_attempt(tmp_path, "j", 1), launcher="python", ranks_started=True
    )
    assert (outcome.state, outcome.reason, outcome.exit_code) == (
        JobState.SUCCEEDED,
        ExitReason.COMPLETED,
        0,
    )


# Each spelling of running out of GPU (or host) memory, as the rank's error record (its
# "Type: message", `jobs.runtime.failure`) or the end of its log has it.
GPU_OOM_ERRORS = {
    "torch OutOfMemoryError": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "torch.OutOfMemoryError, as a traceback names it": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 3.56 MiB is free."
    ),
    "AcceleratorError from a kernel launch": (
        "AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in "
        "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
    ),
    "torch.AcceleratorError, as a traceback names it": (
        "torch.AcceleratorError: CUDA error: out of memory"
    ),
    "RuntimeError CUDA error, torch before AcceleratorError": (
        "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously "
        "reported at some other API call"
    ),
    "CUDA driver API": "RuntimeError: CUDA driver error: out of memory",
    "NCCL through torch": (
        "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled cuda error (run "
        "with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\nncclUnhandledCudaError: Call "
        "to CUDA function failed.\nLast error:\nCuda failure 'out of memory'"
    ),
    "NCCL with the CUDA error's number": (
        "DistBackendError: NCCL error: unhandled cuda error\nLast error:\n"
        "Cuda failure 2 'out of memory'"
    ),
    "NCCL's own warning in the log": (
        "gpu-01:1234:1290 [0] include/alloc.h:114 NCCL WARN Cuda failure 'out of memory'"
    ),
    "cuBLAS": (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    ),
    "cuDNN, not enough memory": "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_ENOUGH_MEMORY",
    "cuDNN, allocation failed": "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "Python": "MemoryError",
}
NOT_OOM_ERRORS = {
    "an illegal memory access": (
        "AcceleratorError: CUDA error: an illegal memory access was encountered"
    ),
    "cuBLAS execution": "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED",
    "cuDNN bad parameter": "RuntimeError: cuDNN error: CUDNN_STATUS_BAD_PARAM",
    "NCCL, another CUDA failure": (
        "DistBackendError: NCCL error: unhandled cuda error\nLast error:\n"
        "Cuda failure 'invalid device ordinal'"
    ),
    "a word about memory": "ValueError: memory_format must be contiguous",
}


@pytest.mark.parametrize("error", GPU_OOM_ERRORS.values(), ids=GPU_OOM_ERRORS.keys())
def test_gpu_out_of_memory_in_its_many_spellings(tmp_path: Path, error: str) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    write_failure(paths, 1, error, error)
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert outcome.reason == ExitReason.OOM, error


@pytest.mark.parametrize("error", GPU_OOM_ERRORS.values(), ids=GPU_OOM_ERRORS.keys())
def test_gpu_out_of_memory_in_the_log_of_an_aborted_rank(tmp_path: Path, error: str) -> None:
    """No error record (NCCL's error handling aborted the rank before Python could write
    one): the end of the rank's log names the cause."""
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    paths.log_dir.mkdir(parents=True)
    paths.launcher_log.write_text(ABORT_SUMMARY)
    paths.rank_log(1).write_text(f"step 3\n{error}\nterminate called after throwing an instance\n")
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (outcome.reason, outcome.exit_code) == (ExitReason.OOM, -6), error
    assert outcome.message is not None and outcome.message.startswith(
        "rank 1 failed (exit code -6, SIGABRT)"
    )


@pytest.mark.parametrize("error", NOT_OOM_ERRORS.values(), ids=NOT_OOM_ERRORS.keys())
def test_other_gpu_errors_stay_user_errors(tmp_path: Path, error: str) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    write_failure(paths, 1, error, error)
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert outcome.reason == ExitReason.USER_ERROR, error


WATCHDOG_SUMMARY = SUMMARY.replace(
    "exitcode  : -15 (pid: 13071)  (SIGTERM)", "exitcode  : -6 (pid: 13071)  (SIGABRT)"
)


def test_a_watchdog_sigabrt_does_not_outrank_the_error_that_caused_it(tmp_path: Path) -> None:
    """Rank 1 runs out of GPU memory; rank 0, stuck in the collective rank 1 never joined, is
    aborted by NCCL's watchdog (SIGABRT, no Python error)."""
    oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB"
    assert find_failing_rank(WATCHDOG_SUMMARY, {1: record(1, 5.0, oom)}) == RankFailure(1, 1)
    # No record at all: torchrun's root cause, also when that is the aborted rank.
    assert find_failing_rank(WATCHDOG_SUMMARY, {}) == RankFailure(1, 1)
    only_abort = WATCHDOG_SUMMARY[: WATCHDOG_SUMMARY.find("Root Cause")] + (
        "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -6 (pid: 13071)\n"
    )
    assert find_failing_rank(only_abort, {}) == RankFailure(0, -6)

    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    write_failure(paths, 1, oom, oom)
    paths.launcher_log.write_text(WATCHDOG_SUMMARY)
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (outcome.reason, outcome.exit_code) == (ExitReason.OOM, 1)
    assert outcome.message is not None and outcome.message.startswith("rank 1 failed")


WATCHDOG_LOG = (
    "[rank0]:[E1125 10:41:07.123 ProcessGroupNCCL.cpp:685] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600005 milliseconds before timing out.\n"
    "terminate called after throwing an instance of 'c10::DistBackendError'\n"
)
# torchrun saw rank 0's SIGABRT first: it is the root cause, the failed peer a mere failure.
WATCHDOG_ROOT = """
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 13072)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : -6 (pid: 13071)
  traceback : Signal 6 (SIGABRT) received by PID 13071
"""


@pytest.mark.parametrize(
    ("peer_error", "reason"),
    [
        ("AcceleratorError: CUDA error: out of memory", ExitReason.OOM),
        ("ValueError: labels out of range", ExitReason.USER_ERROR),
    ],
)
def test_a_peers_python_error_outranks_the_watchdogs_sigabrt_as_root_cause(
    tmp_path: Path, peer_error: str, reason: ExitReason
) -> None:
    """The watchdog aborted rank 0 (SIGABRT, no Python error, torchrun's root cause) while it
    waited for rank 1, which had failed with a Python error: rank 1's error is the job's."""
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    write_failure(paths, 1, peer_error, f"Traceback (most recent call last):\n{peer_error}\n")
    paths.launcher_log.write_text(WATCHDOG_ROOT)
    paths.rank_log(0).write_text(WATCHDOG_LOG)
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (outcome.reason, outcome.exit_code) == (reason, 1)
    assert outcome.message is not None
    assert outcome.message.startswith(f"rank 1 failed (exit code 1): {peer_error}")
    # Without the peer's record, the aborted rank and the watchdog's words are all there is.
    (paths.log_dir / "rank-1.error.json").unlink()
    alone = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (alone.reason, alone.exit_code) == (ExitReason.USER_ERROR, -6)
    assert alone.message is not None and "Watchdog caught collective" in alone.message


def test_the_record_naming_the_cause_beats_an_earlier_consequence() -> None:
    """Rank 0's collective broke (its peer died) a moment before rank 1's OOM was recorded."""
    broken = "DistBackendError: NCCL communicator was aborted on rank 0"
    oom = "AcceleratorError: CUDA error: out of memory"
    records = {0: record(0, 10.1, broken), 1: record(1, 10.4, oom)}
    assert find_failing_rank(SUMMARY, records) == RankFailure(1, 1)
    # Without a cause named, the earliest error wins as before.
    records = {0: record(0, 10.1, broken), 1: record(1, 10.4)}
    assert find_failing_rank(SUMMARY, records).rank == 0  # type: ignore[union-attr]


ABORT_SUMMARY = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/w/rank_main.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_05:49:05
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -6 (pid: 13072)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 13072
============================================================
"""


def aborted_at_exit(tmp_path: Path, finished: tuple[int, ...]) -> RunPaths:
    paths = RunPaths.for_attempt(tmp_path, "job", 1)
    paths.log_dir.mkdir(parents=True)
    paths.launcher_log.write_text(ABORT_SUMMARY)
    for rank in (0, 1):
        paths.rank_log(rank).write_text("terminate called without an active exception\n")
    for rank in finished:
        (paths.log_dir / f"rank-{rank}.finished").write_text(json.dumps({"restart": 0}))
    return paths


def test_an_abort_at_exit_after_every_rank_finished_is_a_success(tmp_path: Path) -> None:
    paths = aborted_at_exit(tmp_path, finished=(0, 1))
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (outcome.state, outcome.reason, outcome.exit_code) == (
        JobState.SUCCEEDED,
        ExitReason.COMPLETED,
        0,
    )
    assert outcome.message is not None and outcome.message.startswith("warning: rank 1 ")


def test_an_abort_before_every_rank_finished_stays_a_failure(tmp_path: Path) -> None:
    paths = aborted_at_exit(tmp_path, finished=(0,))
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (outcome.state, outcome.reason) == (JobState.FAILED, ExitReason.USER_ERROR)
    # ... and so does another signal, or a finish recorded in an earlier elastic restart.
    paths = aborted_at_exit(tmp_path / "b", finished=(0, 1))
    paths.launcher_log.write_text(ABORT_SUMMARY.replace("exitcode  : -6", "exitcode  : -11"))
    assert classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True).state == "failed"
    paths = aborted_at_exit(tmp_path / "c", finished=(0, 1))
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True, restart=1)
    assert outcome.state is JobState.FAILED


STOPPED_PEER = """[1]:
  time      : 2026-11-22_05:49:05
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 13071)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 13071"""


def test_a_peer_stopped_by_torchrun_after_the_abort_at_exit_is_still_a_success(
    tmp_path: Path,
) -> None:
    # torchrun SIGTERMs the ranks still alive once one aborted: they had finished too.
    paths = aborted_at_exit(tmp_path, finished=(0, 1))
    paths.launcher_log.write_text(ABORT_SUMMARY.replace("  <NO_OTHER_FAILURES>", STOPPED_PEER))
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert (outcome.state, outcome.reason) == (JobState.SUCCEEDED, ExitReason.COMPLETED)
    # Stopped ranks with no abort among them are no abort at exit.
    paths = aborted_at_exit(tmp_path / "b", finished=(0, 1))
    only_stopped = ABORT_SUMMARY.replace("  <NO_OTHER_FAILURES>", STOPPED_PEER)
    paths.launcher_log.write_text(only_stopped.replace("exitcode  : -6", "exitcode  : -15"))
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert outcome.state is JobState.FAILED


def test_a_port_in_use_says_how_to_fix_the_script(tmp_path: Path) -> None:
    paths = RunPaths.for_attempt(tmp_path, "job", 1)
    error = (
        "RuntimeError: The server socket has failed to listen on any local network address. "
        "port: 12355, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"
    )
    write_failure(paths, 0, error, error)
    outcome = classify_exit(1, paths=paths, launcher="python", ranks_started=True)
    assert outcome.state is JobState.FAILED and outcome.message is not None
    assert "os.environ.setdefault('MASTER_PORT'" in outcome.message
