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


GPU_OOM_ERRORS = [
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation'",
    "DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, unhandled cuda error (run "
    "with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\nncclUnhandledCudaError: Call to "
    "CUDA function failed.\nLast error:\nCuda failure 'out of memory'",
    "DistBackendError: NCCL error: unhandled cuda error\nLast error:\n"
    "Cuda failure 2 'out of memory'",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_ENOUGH_MEMORY",
    "MemoryError",
]


@pytest.mark.parametrize("error", GPU_OOM_ERRORS)
def test_gpu_out_of_memory_in_its_many_spellings(tmp_path: Path, error: str) -> None:
    paths = RunPaths.for_attempt(tmp_path, "j", 1)
    write_failure(paths, 1, error, error)
    outcome = classify_exit(1, paths=paths, launcher="torchrun", ranks_started=True)
    assert outcome.reason == ExitReason.OOM, error


@pytest.mark.parametrize(
    "error",
    [
        "AcceleratorError: CUDA error: an illegal memory access was encountered",
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED",
        "ValueError: memory_format must be contiguous",
    ],
)
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
