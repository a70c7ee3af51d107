"""The worker's watchdog (`worker.watchdog`): forked for real here, told of attempts over its
pipe, it acts on the attempt named last when the pipe ends, and on nothing when that was "-".
(The worker killed for real, and the attempt recorded lost: tests/integration/worker/
test_rq_worker.py.)"""

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.states import AttemptRef
from worker.watchdog import IDLE, last_attempt, parse_attempt, watchdog


def deaths_seen(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def recorder(path: Path) -> Callable[[AttemptRef], None]:
    def on_death(ref: AttemptRef) -> None:  # runs in the watchdog, a forked child
        path.write_text(f"{ref.job_id} {ref.attempt} {ref.node}\n")

    return on_death


def test_the_attempt_named_when_the_pipe_ends_is_the_one_acted_on(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    with watchdog(recorder(seen)) as dog:
        with dog.watching(AttemptRef("done", 1, None)):
            pass
        with dog.watching(AttemptRef("job-b", 3, 1)):
            assert deaths_seen(seen) == []
            # The worker "dies" here: it never says "-", and its end of the pipe closes.
            dog.write_fd = None
    # Leaving the block closed the pipe and reaped the watchdog, which acted first.
    assert deaths_seen(seen) == ["job-b 3 1"]


def test_a_worker_that_ends_between_attempts_leaves_nothing_to_act_on(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    with watchdog(recorder(seen)) as dog:
        with dog.watching(AttemptRef("job-a", 1, None)):
            pass
    # Leaving the block reaped the watchdog: it has ended, having done nothing.
    assert deaths_seen(seen) == []
    # Told nothing more once it is gone (its file number may be another file's by now).
    assert dog.write_fd is None
    with dog.watching(AttemptRef("job-c", 1, None)):
        pass


@pytest.mark.parametrize(
    ("line", "ref"),
    [
        ("abc 2", AttemptRef("abc", 2, None)),
        ("abc 2 0", AttemptRef("abc", 2, 0)),
        (IDLE, None),
        ("", None),
        ("abc two", None),
        ("abc 2 0 extra", None),
    ],
)
def test_lines_are_read_strictly(line: str, ref: AttemptRef | None) -> None:
    assert parse_attempt(line) == ref


def test_the_last_line_of_the_pipe_counts() -> None:
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"a 1\n-\nb 2\n")
    os.close(write_fd)
    assert last_attempt(read_fd) == AttemptRef("b", 2, None)
