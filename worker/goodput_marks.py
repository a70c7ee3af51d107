"""The goodput marks of one attempt (docs/goodput.md), gathered by its supervisor from what the
ranks write and kept as one row (`service.records.save_attempt_marks`), whatever the program
writes: every time is clipped to the attempt (from its start to the moment it is read), the
spans of one kind count the time no earlier span of that kind covered (overlapping, repeated
or out-of-order marks add nothing), and each mark costs a few comparisons. A billion marks make
one row, and a program's nonsense lands in its own ledger only."""

import time

from jobs.contract.events import CHECKPOINT_SAVE, EVAL, CheckpointEvent, SpanEvent
from jobs.contract.goodput import AttemptMarks

MAX_COUNT = 2**31 - 1  # what the row's integer columns hold


class AttemptMarker:
    """One attempt's marks as they come (Unix seconds; `now` is the worker's clock)."""

    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self.first_step_at: float | None = None
        self.last_progress_at: float | None = None
        self.totals = {CHECKPOINT_SAVE: 0.0, EVAL: 0.0}
        self.counts = {CHECKPOINT_SAVE: 0, EVAL: 0}
        # Up to when each kind's spans are counted already.
        self.covered = {CHECKPOINT_SAVE: started_at, EVAL: started_at}
        self.last_checkpoint_at: float | None = None
        self.ended_at: float | None = None
        self.hang_since: float | None = None
        self.dirty = False

    def _clip(self, moment: float | None, now: float) -> float:
        if moment is None:
            return now
        return min(max(moment, self.started_at), max(now, self.started_at))

    def progress(self, now: float) -> None:
        """Rank 0 wrote to its events file (what the hang watchdog watches)."""
        self.last_progress_at = self._clip(now, now)
        self.dirty = True

    def metric(self, ts: float | None, now: float) -> None:
        """A metric line: the first one ends the first step."""
        if self.first_step_at is None:
            self.first_step_at = self._clip(ts, now)
            self.dirty = True

    def span(self, event: SpanEvent, now: float) -> None:
        if event.kind not in self.totals:
            return
        start = max(self._clip(event.start, now), self.covered[event.kind])
        end = self._clip(event.end, now)
        self.counts[event.kind] = min(self.counts[event.kind] + 1, MAX_COUNT)
        if end > start:
            self.totals[event.kind] += end - start
            self.covered[event.kind] = end
        self.dirty = True

    def checkpoint_registered(self, ts: float | None, now: float) -> None:
        """A checkpoint of this attempt was registered; `ts`: when its save ended."""
        saved = self._clip(ts, now)
        if self.last_checkpoint_at is None or saved > self.last_checkpoint_at:
            self.last_checkpoint_at = saved
            self.dirty = True

    def registered(self, event: CheckpointEvent) -> None:
        """The registrar's word that it registered `event`'s checkpoint."""
        self.checkpoint_registered(event.ts, time.time())

    def stopped(self, now: float, hang_since: float | None = None) -> None:
        """The processes ended (or are being stopped; `hang_since` for a hang stop)."""
        self.ended_at = self._clip(now, now)
        if hang_since is not None:
            self.hang_since = self._clip(hang_since, now)
        self.dirty = True

    def marks(self) -> AttemptMarks:
        return AttemptMarks(
            first_step_at=self.first_step_at,
            last_progress_at=self.last_progress_at,
            checkpoint_stall_s=self.totals[CHECKPOINT_SAVE],
            checkpoint_saves=self.counts[CHECKPOINT_SAVE],
            eval_s=self.totals[EVAL],
            evals=self.counts[EVAL],
            last_checkpoint_at=self.last_checkpoint_at,
            ended_at=self.ended_at,
            hang_since=self.hang_since,
        )
