"""A running attempt's recent step rate, and the time left at it: the Job's `progress.eta_s`.

Fed the (step, wall time) of each metric point as the ingestor reads it, it keeps a window of
the latest steps: at most `WINDOW_MARKS`, and none older than `WINDOW_S` before the newest
(but always two), so the rate is the recent one, not the whole run's average (a run that slows
down, after a warm-up or as its evaluation grows, shows it within the window). The estimate is
`(total_steps - step) / rate` as of the newest step's time, which the API counts down from.

What it does not trust: a point's own `ts` (written by the program) that is not a finite time
within `TRUST_S` of the worker's clock is replaced by the worker's clock; a step lower than the
last (a resume from an earlier checkpoint, an elastic restart) or a time before the last starts
the window again; repeated points of one step (a step's evaluation metrics) count once, at the
step's first time. No total, fewer than two steps, or no time between them: no estimate.
"""

import math
from collections import deque
from dataclasses import dataclass

WINDOW_MARKS = 20
WINDOW_S = 300.0
# A point's own time is used when within this many seconds of the worker's clock (the ranks'
# writer holds lines for at most a second or two; the worker reads them as often).
TRUST_S = 120.0


@dataclass(frozen=True)
class StepMark:
    step: int
    ts: float


@dataclass(frozen=True)
class Estimate:
    """Seconds left at the recent rate, as of `at` (Unix seconds)."""

    eta_s: float
    at: float


class StepRate:
    def __init__(self, window_marks: int = WINDOW_MARKS, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self.marks: deque[StepMark] = deque(maxlen=max(2, window_marks))

    def observe(self, step: int | None, ts: float | None, now: float) -> bool:
        """Note a point of `step` written at `ts` (None: unknown), read at `now` (the worker's
        clock); True when the window changed."""
        if step is None:
            return False
        if ts is None or not math.isfinite(ts) or abs(ts - now) > TRUST_S:
            ts = now
        if self.marks:
            last = self.marks[-1]
            if step == last.step and ts >= last.ts:
                return False
            if step < last.step or ts < last.ts:
                self.marks.clear()
        self.marks.append(StepMark(step, ts))
        newest = self.marks[-1].ts
        while len(self.marks) > 2 and self.marks[0].ts < newest - self.window_s:
            self.marks.popleft()
        return True

    def steps_per_s(self) -> float | None:
        if len(self.marks) < 2:
            return None
        first, last = self.marks[0], self.marks[-1]
        elapsed, steps = last.ts - first.ts, last.step - first.step
        if elapsed <= 0 or steps <= 0:
            return None
        return steps / elapsed

    def estimate(self, total_steps: int | None) -> Estimate | None:
        """The time left to `total_steps` at the recent rate, or None when unknown."""
        rate = self.steps_per_s()
        if total_steps is None or rate is None:
            return None
        last = self.marks[-1]
        return Estimate(max(0, total_steps - last.step) / rate, last.ts)
