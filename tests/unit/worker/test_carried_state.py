"""What rank 0 carries to the next attempt (its TensorBoard reading state) goes from one
attempt's checkpoint directory to the next one's, and nothing a job planted instead of it."""

import os
from pathlib import Path

import pytest

from jobs.capture.tensorboard import STATE_FILE
from worker import carried_state
from worker.launch import RunPaths


def attempt(data: Path, n: int) -> RunPaths:
    paths = RunPaths.for_attempt(data, "job1", n)
    paths.checkpoint_dir.mkdir(parents=True)
    return paths


def test_the_state_goes_from_one_attempt_to_the_next(tmp_path: Path) -> None:
    first = attempt(tmp_path, 1)
    (first.checkpoint_dir / STATE_FILE).write_text('{"files": {"runs/x": 10}}')
    carried_state.keep(first)
    second = attempt(tmp_path, 2)
    carried_state.restore(second)
    assert (second.checkpoint_dir / STATE_FILE).read_text() == '{"files": {"runs/x": 10}}'


def test_a_link_or_an_oversized_file_is_not_carried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("the worker's")
    first = attempt(tmp_path, 1)
    os.symlink(secret, first.checkpoint_dir / STATE_FILE)
    carried_state.keep(first)
    assert not (tmp_path / "runs" / "job1" / STATE_FILE).exists()

    (first.checkpoint_dir / STATE_FILE).unlink()
    (first.checkpoint_dir / STATE_FILE).write_bytes(b"x" * 11)
    monkeypatch.setattr(carried_state, "MAX_BYTES", 10)
    carried_state.keep(first)
    assert not (tmp_path / "runs" / "job1" / STATE_FILE).exists()
    second = attempt(tmp_path, 2)
    carried_state.restore(second)  # nothing kept: nothing put there
    assert not (second.checkpoint_dir / STATE_FILE).exists()
