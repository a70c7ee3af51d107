"""Events-file lines and incremental reading of files the ranks append to."""

import json
from pathlib import Path
from typing import Any

import pytest

from worker.events import (
    CheckpointEvent,
    InvalidEvent,
    MetricEvent,
    metric_points,
    parse_event_line,
)
from worker.ingest import TRUNCATED_MARKER, LineReader


def line(**obj: Any) -> str:
    return json.dumps(obj)


def test_metric_line() -> None:
    event = parse_event_line(
        line(type="metric", step=120, epoch=1, metrics={"loss": 0.31, "accuracy": 1})
    )
    assert event == MetricEvent(step=120, epoch=1, metrics={"loss": 0.31, "accuracy": 1.0})


def test_metric_line_extras() -> None:
    event = parse_event_line(
        line(type="metric", step=3, metrics={"x": 2}, ts=1700000000.5, total_steps=9, note="hi")
    )
    assert isinstance(event, MetricEvent)
    assert (event.epoch, event.ts, event.total_steps) == (None, 1700000000.5, 9)


def test_checkpoint_line() -> None:
    event = parse_event_line(
        line(type="checkpoint", path="step-000120.pt", step=120, epoch=1, metrics={"loss": 0.3})
    )
    assert event == CheckpointEvent("step-000120.pt", 120, 1, {"loss": 0.3})
    assert parse_event_line(line(type="checkpoint", path="a.pt")) == CheckpointEvent(
        "a.pt", None, None, {}
    )


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"type": "metric", "step": 1, "metrics": {"loss": 1}',
        line(type="progress", step=1),
        line(step=1, metrics={"a": 1}),
        line(type="metric", step="1", metrics={"a": 1}),
        line(type="metric", step=True, metrics={"a": 1}),
        line(type="metric", step=-1, metrics={"a": 1}),
        line(type="metric", step=2**31, metrics={"a": 1}),
        line(type="metric", step=1, epoch=1.5, metrics={"a": 1}),
        line(type="metric", step=1, metrics={}),
        line(type="metric", step=1, metrics=[1]),
        line(type="metric", step=1, metrics={"a": "1"}),
        line(type="metric", step=1, metrics={"a": True}),
        line(type="metric", step=1, metrics={"a": None}),
        line(type="metric", step=1, metrics={"": 1}),
        line(type="metric", step=1, metrics={"a" * 129: 1}),
        line(type="metric", step=1, metrics={"a": 10**400}),
        '{"type": "metric", "step": 1, "metrics": {"a": NaN}}',
        '{"type": "metric", "step": 1, "metrics": {"a": Infinity}}',
        line(type="metric", step=1, metrics={"a": 1}, ts="now"),
        # Launchbay's own system metrics: no program may write them.
        line(type="metric", step=1, metrics={"system/gpu0/utilization_percent": 99}),
        line(type="metric", step=1, metrics={"loss": 1, "system/node1/gpu0/power_watts": 1}),
        '{"type": "metric", "step": 1, "metrics": {"a": 1}, "ts": NaN}',
        line(type="checkpoint", step=1),
        line(type="checkpoint", path=""),
        line(type="checkpoint", path=5),
        line(type="checkpoint", path="a.pt", metrics={"loss": "low"}),
    ],
)
def test_invalid_lines(text: str) -> None:
    with pytest.raises(InvalidEvent):
        parse_event_line(text)


def test_points_keep_ts_or_get_the_worker_clock() -> None:
    given = MetricEvent(step=1, epoch=0, metrics={"a": 1.0, "b": 2.0}, ts=100.0)
    assert [(p.name, p.value, p.ts) for p in metric_points(given, now=999.0)] == [
        ("a", 1.0, 100.0),
        ("b", 2.0, 100.0),
    ]
    missing = MetricEvent(step=1, epoch=None, metrics={"a": 1.0})
    [point] = metric_points(missing, now=999.0)
    assert (point.step, point.epoch, point.ts) == (1, None, 999.0)


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def test_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.log"
    reader = LineReader(path, max_line_bytes=256)
    assert reader.read_lines() == []  # no file yet
    append(path, b"one\ntw")
    assert reader.read_lines() == ["one"]
    assert reader.read_lines() == []
    append(path, b"o\r\nthree")
    assert reader.read_lines() == ["two"]
    assert reader.read_lines(final=True) == ["three"]
    assert reader.read_lines(final=True) == []
    assert reader.offset == path.stat().st_size


def test_long_lines_are_cut_and_marked(tmp_path: Path) -> None:
    path = tmp_path / "rank-1.log"
    reader = LineReader(path, max_line_bytes=256)
    append(path, b"a" * 300 + b"\nshort\n" + b"b" * 400)
    assert reader.read_lines() == [
        "a" * 256 + TRUNCATED_MARKER,
        "short",
        "b" * 256 + TRUNCATED_MARKER,
    ]
    append(path, b"b" * 100 + b"\nafter\n")  # the rest of the long line is skipped
    assert reader.read_lines() == ["after"]


def test_text_is_made_storable(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.log"
    append(path, b"nul\x00byte\nbad \xff utf8\n")
    assert LineReader(path, max_line_bytes=256).read_lines() == ["nul\ufffdbyte", "bad \ufffd utf8"]


def test_reads_in_chunks_and_drains(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    append(path, b"".join(b"line %d\n" % i for i in range(5000)) + b"last")
    reader = LineReader(path, max_line_bytes=256, read_bytes=1024)
    first = reader.read_lines()
    assert 0 < len(first) < 5000
    rest = reader.drain()
    assert first + rest == [f"line {i}" for i in range(5000)] + ["last"]
