"""report(): rank 0 only, one parseable JSON line per call (written at once, or queued after
queue_reports()), never crashed by a value."""

from __future__ import annotations

import builtins
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from jobs.runtime import (
    close_events,
    distributed,
    env,
    events,
    queue_reports,
    report,
    write_event,
)
from tests.support.procs import wait_until


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "run" / "events.jsonl"
    monkeypatch.setenv(env.EVENTS_FILE, str(path))
    return path


def test_report_appends_one_metric_line_per_call(events_file: Path) -> None:
    before = time.time()
    report(120, 1, loss=0.31, accuracy=0.91)
    report(121, epoch=2, total_steps=500, loss=0.3)
    first, second = read_lines(events_file)
    assert first["type"] == "metric"
    assert (first["step"], first["epoch"], first["metrics"]) == (
        120,
        1,
        {"loss": 0.31, "accuracy": 0.91},
    )
    assert before <= first["ts"] <= time.time()
    assert (second["step"], second["epoch"], second["total_steps"]) == (121, 2, 500)
    assert "total_steps" not in second["metrics"]


def test_only_rank_zero_writes(events_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    report(1, loss=1.0)
    assert not write_event({"type": "custom"})
    assert not events_file.exists()
    monkeypatch.setenv("RANK", "0")
    report(2, loss=1.0)
    assert [line["step"] for line in read_lines(events_file)] == [2]


def test_without_an_events_file_report_is_a_no_op(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    report(1, loss=1.0)
    assert list(tmp_path.iterdir()) == []


def test_bad_values_are_skipped_not_raised(events_file: Path) -> None:
    with pytest.warns(RuntimeWarning) as caught:
        report(
            3,
            nan_loss=math.nan,
            inf_loss=torch.tensor(math.inf),
            note="hello",
            missing=None,
            vector=torch.ones(3),
            flag=True,
            loss=torch.tensor(0.5),
            count=np.int64(7),
            acc=np.float32(0.25),
        )
    (line,) = read_lines(events_file)
    assert line["metrics"] == {"loss": 0.5, "count": 7, "acc": 0.25}
    skipped = {"nan_loss", "inf_loss", "note", "missing", "vector", "flag"}
    assert all(any(repr(name) in str(w.message) for w in caught) for name in skipped)
    with pytest.warns(RuntimeWarning):
        report(4, only_bad=math.inf)
    assert len(read_lines(events_file)) == 1, "a line with no usable value is not written"


def test_the_file_is_opened_once_and_follows_the_environment(
    events_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []

    def counting_open(path: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(events, "open", counting_open, raising=False)
    for step in range(50):
        report(step, loss=float(step))
    assert opened == [str(events_file)]
    other = tmp_path / "other.jsonl"
    monkeypatch.setenv(env.EVENTS_FILE, str(other))
    report(50, loss=1.0)
    assert opened == [str(events_file), str(other)]
    assert len(read_lines(events_file)) == 50 and len(read_lines(other)) == 1


def test_inside_distributed_the_file_and_rank_are_those_the_context_began_with(
    events_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other.jsonl"
    monkeypatch.setenv("RANK", "0")
    with distributed() as ctx:
        report(1, loss=1.0)
        monkeypatch.setenv(env.EVENTS_FILE, str(other))
        monkeypatch.setenv("RANK", "1")
        report(2, loss=1.0)  # still rank 0 of this context, still its file
        assert write_event({"type": "custom"})
        assert ctx.rank == 0
    assert [line["type"] for line in read_lines(events_file)] == ["metric", "metric", "custom"]
    assert not other.exists()
    report(3, loss=1.0)  # outside a context: rank 1 now, from the environment
    monkeypatch.setenv("RANK", "0")
    with distributed():
        report(4, loss=1.0)  # a new context reads the environment again
    assert [line["step"] for line in read_lines(other)] == [4]
    assert len(read_lines(events_file)) == 3


def test_each_call_writes_its_line_before_it_returns(events_file: Path) -> None:
    for step in range(500):
        report(step, 0, loss=0.5, accuracy=0.75)
        if step % 100 == 0:
            assert read_lines(events_file)[-1]["step"] == step
    assert len(read_lines(events_file)) == 500


def test_queued_reports_wait_for_the_thread_and_close_writes_them(events_file: Path) -> None:
    queue_reports(5.0)
    report(1, loss=0.5)
    report(2, loss=0.25)
    assert not events_file.exists(), "queued: nothing written before the flush"
    close_events()
    assert [(line["step"], line["metrics"]) for line in read_lines(events_file)] == [
        (1, {"loss": 0.5}),
        (2, {"loss": 0.25}),
    ]


def test_the_thread_writes_queued_reports_every_flush_s(events_file: Path) -> None:
    queue_reports(0.05)
    for step in range(3):
        report(step, loss=float(step))
    assert wait_until(lambda: events_file.exists() and len(read_lines(events_file)) == 3, 5)
    report(3, loss=3.0)
    assert wait_until(lambda: len(read_lines(events_file)) == 4, 5)
    assert [line["step"] for line in read_lines(events_file)] == [0, 1, 2, 3]


def test_other_lines_are_written_at_once_after_the_queued_ones(events_file: Path) -> None:
    queue_reports(5.0)
    report(1, loss=1.0)
    assert write_event({"type": "checkpoint", "path": "a.pt", "step": 1})
    assert [line["type"] for line in read_lines(events_file)] == ["metric", "checkpoint"]
    queue_reports(None)
    report(2, loss=1.0)  # written at once again
    assert [line["step"] for line in read_lines(events_file)] == [1, 1, 2]


def test_leaving_distributed_writes_queued_reports(events_file: Path) -> None:
    queue_reports(5.0)
    with distributed():
        report(1, loss=1.0)
    assert [line["step"] for line in read_lines(events_file)] == [1]


def test_queued_reports_are_written_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    code = "import jobs.runtime as lb; lb.queue_reports(5.0); lb.report(7, loss=1.0)"
    environment = {**os.environ, env.EVENTS_FILE: str(path)}
    subprocess.run([sys.executable, "-c", code], env=environment, check=True, timeout=120)
    assert [line["step"] for line in read_lines(path)] == [7]


def test_a_forked_child_leaves_its_parents_queue_alone(events_file: Path) -> None:
    queue_reports(5.0)
    report(1, loss=1.0)
    pid = os.fork()
    if pid == 0:  # the child
        status = 1
        try:
            report(2, loss=2.0)
            close_events()
            status = 0
        finally:
            os._exit(status)
    assert os.waitpid(pid, 0)[1] == 0
    close_events()
    assert sorted(line["step"] for line in read_lines(events_file)) == [1, 2]


@pytest.mark.parametrize("flush_s", [0, -1, 11])
def test_queue_reports_refuses_a_flush_interval_out_of_range(flush_s: float) -> None:
    with pytest.raises(ValueError, match="flush_s"):
        queue_reports(flush_s)
