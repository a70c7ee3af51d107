"""The events file's lines (README, "Inside the ranks"): the one protocol between training code
and Launchbay. The writer's builders (`metric_line`, `checkpoint_line`, used by `jobs.runtime`
and `jobs.integrations`) and the parser (`parse_event_line`, used by the worker) sit side by
side.

One JSON object per line, appended by rank 0:

    {"type": "metric", "step": 120, "epoch": 1, "metrics": {"loss": 0.31}, "ts"?: 1732200000.1,
     "total_steps"?: 900}
    {"type": "checkpoint", "path": "step-000120.pt", "step": 120, "epoch": 1, "metrics": {...},
     "ts"?: 1732200002.4}
    {"type": "checkpoint_save", "start": 1732200000.1, "end": 1732200002.4, "step"?: 120}
    {"type": "eval", "start": 1732200010.0, "end": 1732200013.5, "step"?: 120}

`checkpoint_save` and `eval` are marks (`span_line`): the training loop was blocked from `start`
to `end` (Unix seconds) saving a checkpoint, or evaluating. They feed the job's goodput ledger
(`jobs.contract.goodput`, docs/goodput.md); one line per span, written when it ends. A
checkpoint line's `ts` is when its save ended.

A line that breaks the format (bad JSON, wrong types, non-finite numbers, values the database
columns cannot hold, a metric named as Launchbay's own system metrics) raises `InvalidEvent`;
the caller skips and counts it.
"""

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.contract.system_metrics import SYSTEM_PREFIX, is_system_metric

METRIC = "metric"
CHECKPOINT = "checkpoint"
CHECKPOINT_SAVE = "checkpoint_save"
EVAL = "eval"
SPANS = (CHECKPOINT_SAVE, EVAL)


def metric_line(
    step: int,
    epoch: int | None,
    metrics: Mapping[str, float],
    *,
    total_steps: int | None = None,
    ts: float | None = None,
) -> dict[str, Any]:
    """A `metric` line (`metrics` already cleaned: finite numbers)."""
    line: dict[str, Any] = {"type": METRIC, "step": step, "epoch": epoch, "metrics": metrics}
    if total_steps is not None:
        line["total_steps"] = total_steps
    if ts is not None:
        line["ts"] = ts
    return line


def checkpoint_line(
    path: str, step: int | None, epoch: int | None, metrics: Mapping[str, float]
) -> dict[str, Any]:
    """A `checkpoint` line: `path` relative to the checkpoint directory, the file complete
    (`step` and `epoch` None where a framework's checkpoint does not say them)."""
    return {"type": CHECKPOINT, "path": path, "step": step, "epoch": epoch, "metrics": metrics}


def span_line(kind: str, start: float, end: float, step: int | None = None) -> dict[str, Any]:
    """A mark: the training loop was blocked from `start` to `end` (`kind`: one of `SPANS`)."""
    if kind not in SPANS:
        raise ValueError(f"a span is one of {SPANS}, not {kind!r}")
    line: dict[str, Any] = {"type": kind, "start": start, "end": end}
    if step is not None:
        line["step"] = step
    return line


MAX_INT32 = 2**31 - 1
MAX_METRIC_NAME = 128


class InvalidEvent(ValueError):
    """An events-file line that breaks the format; it is skipped and counted."""


@dataclass(frozen=True)
class MetricEvent:
    step: int | None
    epoch: int | None
    metrics: dict[str, float]
    ts: float | None = None
    total_steps: int | None = None


@dataclass(frozen=True)
class CheckpointEvent:
    path: str
    step: int | None
    epoch: int | None
    metrics: dict[str, float] = field(default_factory=dict)
    # When its save ended, as the program says (the worker keeps it within the attempt).
    ts: float | None = None


@dataclass(frozen=True)
class SpanEvent:
    """A `checkpoint_save` or `eval` mark, as written: `end` is not before `start`; how far
    to believe the times is the worker's to decide (it clips them to the attempt)."""

    kind: str
    start: float
    end: float
    step: int | None = None


def _count(obj: dict[str, Any], key: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT32:
        raise InvalidEvent(f"{key} must be an integer from 0 to {MAX_INT32}")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidEvent(f"{what} must be a number")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidEvent(f"{what} is out of range") from None
    if not math.isfinite(number):
        raise InvalidEvent(f"{what} must be finite")
    return number


def _metrics(value: Any, *, required: bool) -> dict[str, float]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict) or (required and not value):
        raise InvalidEvent("metrics must be a non-empty object" if required else "bad metrics")
    metrics = {}
    for name, number in value.items():
        if not name or len(name) > MAX_METRIC_NAME or "\x00" in name:
            raise InvalidEvent(f"metric names must be 1..{MAX_METRIC_NAME} characters")
        if required and is_system_metric(name):
            raise InvalidEvent(
                f"metric {name!r}: names starting with {SYSTEM_PREFIX!r} are Launchbay's own "
                "system metrics"
            )
        metrics[name] = _number(number, f"metric {name!r}")
    return metrics


def _span(kind: str, obj: dict[str, Any], step: int | None) -> SpanEvent:
    start = _number(obj.get("start"), f"{kind} start")
    end = _number(obj.get("end"), f"{kind} end")
    if end < start:
        raise InvalidEvent(f"{kind} ends before it starts")
    return SpanEvent(kind, start, end, step)


def parse_event_line(line: str) -> MetricEvent | CheckpointEvent | SpanEvent:
    """One line of the events file; InvalidEvent if malformed.

    Unknown keys are ignored, so newer training code can add some; unknown types are invalid.
    """
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise InvalidEvent(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidEvent("not a JSON object")
    kind = obj.get("type")
    step, epoch = _count(obj, "step"), _count(obj, "epoch")
    if kind == METRIC:
        ts = obj.get("ts")
        return MetricEvent(
            step=step,
            epoch=epoch,
            metrics=_metrics(obj.get("metrics"), required=True),
            ts=None if ts is None else _number(ts, "ts"),
            total_steps=_count(obj, "total_steps"),
        )
    if kind == CHECKPOINT:
        path = obj.get("path")
        if not isinstance(path, str) or not path or "\x00" in path:
            raise InvalidEvent("checkpoint path must be a non-empty string")
        ts = obj.get("ts")
        return CheckpointEvent(
            path,
            step,
            epoch,
            _metrics(obj.get("metrics"), required=False),
            ts=None if ts is None else _number(ts, "ts"),
        )
    if kind in SPANS:
        return _span(kind, obj, step)
    raise InvalidEvent(f"unknown event type {kind!r}")
