"""`log_metrics`: metrics a program prints. Each pattern of the spec (RE2, checked at submission
by `jobs.user_regex`, so no pattern can backtrack) is searched in each line of rank 0's log as
the worker reads it; every match gives a point per named group that reads as a finite number,
at the step and epoch its `step` and `epoch` groups give (none without them), timed when read.

    log_metrics: ["epoch (?P<epoch>\\d+): .*'accuracy': (?P<accuracy>[0-9.]+)"]
"""

import math
from collections.abc import Sequence

from jobs.contract.events import MAX_INT32, MAX_METRIC_NAME
from jobs.spec import POINT_GROUPS
from jobs.user_regex import compile_user_regex
from service.records import NewMetricPoint

# Matches taken from one line per pattern: a pattern that matches every character of a long
# line gives a few points, not thousands.
MAX_MATCHES_PER_LINE = 32
MAX_NUMBER_CHARS = 64


def _number(text: str | None) -> float | None:
    if text is None or len(text) > MAX_NUMBER_CHARS:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _count(text: str | None) -> int | None:
    """A step or epoch: a number from 0 to the largest the database holds (its whole part)."""
    value = _number(text)
    if value is None or not 0 <= value <= MAX_INT32:
        return None
    return int(value)


class LogMetrics:
    """The spec's patterns, compiled once per attempt."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self.patterns = [compile_user_regex(p, capture=True).compiled for p in patterns]

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def points(self, lines: Sequence[str], ts: float) -> list[NewMetricPoint]:
        found: list[NewMetricPoint] = []
        for line in lines:
            for pattern in self.patterns:
                for number, match in enumerate(pattern.finditer(line)):
                    if number >= MAX_MATCHES_PER_LINE:
                        break
                    found += self._match_points(match.groupdict(), ts)
        return found

    @staticmethod
    def _match_points(groups: dict[str, str | None], ts: float) -> list[NewMetricPoint]:
        step, epoch = _count(groups.get("step")), _count(groups.get("epoch"))
        points = []
        for name, text in groups.items():
            value = _number(text)
            if name in POINT_GROUPS or value is None or len(name) > MAX_METRIC_NAME:
                continue
            points.append(NewMetricPoint(step=step, epoch=epoch, name=name, value=value, ts=ts))
        return points
