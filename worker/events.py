"""The events file's lines, as the worker stores them: the format and its parser are the
contract in `jobs.contract.events`."""

from jobs.contract.events import (
    CheckpointEvent,
    InvalidEvent,
    MetricEvent,
    SpanEvent,
    parse_event_line,
)
from service.records import NewMetricPoint

__all__ = [
    "CheckpointEvent",
    "InvalidEvent",
    "MetricEvent",
    "SpanEvent",
    "metric_points",
    "parse_event_line",
]


def metric_points(event: MetricEvent, now: float) -> list[NewMetricPoint]:
    """One point per metric; the event's own `ts` when it has one, else the worker's clock."""
    ts = event.ts if event.ts is not None else now
    return [
        NewMetricPoint(step=event.step, epoch=event.epoch, name=name, value=value, ts=ts)
        for name, value in event.metrics.items()
    ]
