"""The lines the framework integrations write (`jobs.integrations`): the contract's metric and
checkpoint lines, key for key, as they have always been."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobs.integrations.attach import common
from jobs.integrations.values import planned_steps, report_values
from jobs.runtime import close_events, env


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(env.EVENTS_FILE, str(path))
    monkeypatch.setenv(env.CHECKPOINT_DIR, str(tmp_path / "checkpoints"))
    monkeypatch.setattr(common, "latest", {})
    monkeypatch.setattr(common, "_reported", set())
    monkeypatch.setattr(common, "_last_epoch", None)
    return path


def test_a_frameworks_values_are_one_metric_line(events_file: Path) -> None:
    assert report_values(12, {"loss": 0.5, "epoch": 2.5})
    close_events()
    [line] = read_lines(events_file)
    assert list(line) == ["type", "step", "epoch", "metrics", "ts"]
    assert {**line, "ts": None} == {
        "type": "metric",
        "step": 12,
        "epoch": 2,
        "metrics": {"loss": 0.5, "epoch": 2.5},
        "ts": None,
    }


def test_the_epoch_said_again_at_the_same_step_is_left_out(events_file: Path) -> None:
    assert common.report(4, {"loss": 1.0, "epoch": 1.0})
    assert common.report(4, {"eval_loss": 2.0, "epoch": 1.0})
    close_events()
    lines = read_lines(events_file)
    assert [(line["step"], line["epoch"], line["metrics"]) for line in lines] == [
        (4, 1, {"loss": 1.0, "epoch": 1.0}),
        (4, 1, {"eval_loss": 2.0}),
    ]
    assert list(lines[1]) == ["type", "step", "epoch", "metrics", "ts"]


def test_a_captured_checkpoint_is_one_checkpoint_line(events_file: Path) -> None:
    common.report(7, {"loss": 0.25})
    directory = env.checkpoint_dir()
    directory.mkdir(parents=True)
    (directory / "model.pt").write_bytes(b"weights")
    assert common.register_checkpoint(None, directory / "model.pt", step=None, epoch=None) == (
        "model.pt"
    )
    close_events()
    line = read_lines(events_file)[-1]
    assert list(line) == ["type", "path", "step", "epoch", "metrics", "ts"]
    assert {**line, "ts": None} == {
        "type": "checkpoint",
        "path": "model.pt",
        "step": None,
        "epoch": None,
        "metrics": {"loss": 0.25},
        "ts": None,
    }


def test_no_framework_value_forges_a_system_metric_and_a_planned_total_is_kept(
    events_file: Path,
) -> None:
    assert common.report(3, {"loss": 1.0, "system/gpu0/utilization_percent": 0.0}, 500)
    assert not report_values(4, {"system/gpu0/power_watts": 1.0})
    close_events()
    [line] = read_lines(events_file)
    assert (line["metrics"], line["total_steps"]) == ({"loss": 1.0}, 500)


def test_a_framework_s_planned_steps_are_the_total() -> None:
    assert [planned_steps(s) for s in (0, -1, None, True, 2.5, "9")] == [None] * 6
    assert planned_steps(1200) == 1200
