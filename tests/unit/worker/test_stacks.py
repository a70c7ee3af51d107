"""Reading a py-spy dump: which rank is in a collective."""

import os
from pathlib import Path

from service.models import RankStack
from service.stack_summary import summarize
from worker.launch import FLIGHT_RECORDER_PREFIX
from worker.stacks import flight_recorder_dumps, in_collective, last_output_ts

WAITING = """\
Thread 10 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2810)
    wrapper (torch/distributed/c10d_logger.py:81)
    <module> (train.py:9)
"""
WAITING_ON_WORK = """\
Thread 10 (idle): "MainThread"
    wait (torch/distributed/_functional_collectives.py:140)
    step (train.py:30)
"""
ELSEWHERE = """\
Thread 11 (idle): "MainThread"
    <module> (train.py:13)
    run_path (<frozen runpy>:291)
Thread 12 (idle): "pin_memory"
    wait (threading.py:331)
"""


def test_a_collective_or_a_wait_on_one_is_in_a_collective() -> None:
    assert in_collective(WAITING) and in_collective(WAITING_ON_WORK)
    # A thread waiting on a condition, or a user function named like a collective, is not.
    assert not in_collective(ELSEWHERE)
    assert not in_collective("    all_reduce (my_code/ops.py:3)\n")


def test_the_flight_recorder_dumps_are_found_per_rank(tmp_path: Path) -> None:
    (tmp_path / f"{FLIGHT_RECORDER_PREFIX}0").write_bytes(b"x")
    (tmp_path / f"{FLIGHT_RECORDER_PREFIX}1").write_bytes(b"y")
    (tmp_path / f"{FLIGHT_RECORDER_PREFIX}tmp").write_bytes(b"z")
    assert sorted(flight_recorder_dumps(tmp_path)) == [0, 1]


def capture_row(rank: int, last: float | None) -> RankStack:
    return RankStack(
        job_id="j", attempt=1, rank=rank, ts=100.0, reason="request", stack="",
        in_collective=True, last_output_ts=last,
    )  # fmt: skip


def test_a_rank_that_never_printed_is_not_said_to_have_stopped(tmp_path: Path) -> None:
    """A healthy job whose rank 1 prints nothing: its log, made empty when it started, is
    not output that stopped; rank 0 printing on is no sign that rank 1 is behind."""
    (tmp_path / "rank-0.log").write_text("step 1\nstep 2\n")
    (tmp_path / "rank-1.log").write_text("")
    os.utime(tmp_path / "rank-1.log", (10.0, 10.0))  # made at the start, long before
    os.utime(tmp_path / "rank-0.log", (90.0, 90.0))
    assert last_output_ts(tmp_path, 0) == 90.0
    assert last_output_ts(tmp_path, 1) is None
    assert last_output_ts(tmp_path, 2) is None  # no log at all
    rows = [capture_row(r, last_output_ts(tmp_path, r)) for r in (0, 1)]
    summary = summarize(rows)
    assert summary is not None and summary.behind == []
    assert "stopped writing" not in summary.note


def test_a_rank_that_printed_then_stopped_while_the_others_kept_on_is_behind(
    tmp_path: Path,
) -> None:
    for rank, last in ((0, 90.0), (1, 20.0), (2, 89.0)):
        (tmp_path / f"rank-{rank}.log").write_text(f"rank {rank} started\n")
        os.utime(tmp_path / f"rank-{rank}.log", (last, last))
    summary = summarize([capture_row(r, last_output_ts(tmp_path, r)) for r in (0, 1, 2)])
    assert summary is not None and summary.behind == [1]
    assert summary.note.endswith("rank(s) 1 stopped writing output well before the others")
