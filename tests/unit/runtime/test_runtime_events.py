"""report(): rank 0 only, one parseable JSON line per call, cheap, never crashed by a value."""

from __future__ import annotations

import builtins
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from jobs.runtime import env, events, report, write_event


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


def test_report_is_cheap_enough_to_call_every_step(events_file: Path) -> None:
    calls = 5000
    started = time.perf_counter()
    for step in range(calls):
        report(step, 0, loss=0.5, accuracy=0.75)
    rate = calls / (time.perf_counter() - started)
    assert rate > 2000, f"only {rate:.0f} report() calls per second"
    assert len(events_file.read_text().splitlines()) == calls
