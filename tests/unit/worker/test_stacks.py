"""Reading a py-spy dump: which rank is in a collective."""

from pathlib import Path

from worker.launch import FLIGHT_RECORDER_PREFIX
from worker.stacks import flight_recorder_dumps, in_collective

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
