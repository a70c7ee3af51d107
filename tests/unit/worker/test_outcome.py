"""Naming the failing rank from torchrun's summary and the ranks' error records."""

import json
from pathlib import Path

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
