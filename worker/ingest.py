"""Tail what the ranks write (their log files, rank 0's events file) into the database.

The ranks never wait on the worker: they append to files, and the supervisor loop reads the new
bytes of each file from the offset it reached last time. Only complete lines are taken (a
partial last line waits for its newline, or for the end of the run). While an event stream
watches the job (`live`, which the supervisor reads from the job's row), every poll reads and
stores what is new, for the stream's latency. Otherwise, once something is stored, the next read
waits `STORE_EVERY_S` and what came meanwhile goes in one transaction: a transaction costs the
supervisor a few milliseconds of CPU whatever it holds, taken beside ranks that keep every core
busy, so storing every poll (ten a second) slowed their steps by a few percent
(`docs/benchmarks.md`, P1I). The final poll reads and stores at once. When the database is slow
or down, the batch is kept and retried on the next poll; nothing more is read until it is
stored. When the job is no longer this attempt's (`AttemptSuperseded`), the batch is dropped and
nothing more is read: `superseded` tells the supervisor to stop.
"""

import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.contract import rank_files
from jobs.states import AttemptRef
from service.db import session_scope
from service.records import (
    AttemptSuperseded,
    NewLogLine,
    NewMetricPoint,
    append_output,
    save_attempt_marks,
)
from worker.events import (
    CheckpointEvent,
    InvalidEvent,
    MetricEvent,
    SpanEvent,
    metric_points,
    parse_event_line,
)
from worker.goodput_marks import AttemptMarker
from worker.log_metrics import LogMetrics
from worker.step_rate import StepRate

log = logging.getLogger(__name__)

TRUNCATED_MARKER = " [... line truncated by launchbay]"
BATCH_ROWS = 5000  # rows per transaction
# Seconds from a read that found something to the next read, while no stream watches the job.
STORE_EVERY_S = 1.0
MAX_INVALID_REASONS = 5  # invalid events-file lines whose reason the job's user is shown


def clean_text(raw: bytes) -> str:
    """Bytes of one line as text the database takes (PostgreSQL refuses NUL characters)."""
    return raw.decode("utf-8", "replace").rstrip("\r").replace("\x00", "\ufffd")


class LineReader:
    """Complete lines appended to one file, read incrementally by byte offset.

    A line longer than `max_line_bytes` is cut there and marked; the rest of it is skipped.
    """

    def __init__(self, path: Path, max_line_bytes: int, read_bytes: int = 1 << 20) -> None:
        self.path = path
        self.offset = 0
        self.max_line_bytes = max_line_bytes
        self.read_bytes = max(read_bytes, 2 * max_line_bytes + 2)
        self._skipping = False

    def _cut(self, raw: bytes) -> str:
        return clean_text(raw[: self.max_line_bytes]) + TRUNCATED_MARKER

    def read_lines(self, *, final: bool = False) -> list[str]:
        """The complete lines written since the last call; with `final`, also a last line that
        has no newline (the writer is gone)."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # replaced or truncated: start over
            self.offset, self._skipping = 0, False
        if size == self.offset:
            return []
        try:  # never through a link: the job's user owns the directory
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return []
        with open(fd, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(min(size - self.offset, self.read_bytes))
        lines: list[str] = []
        start = 0
        while (newline := data.find(b"\n", start)) != -1:
            raw, start = data[start:newline], newline + 1
            if self._skipping:
                self._skipping = False
            elif len(raw) > self.max_line_bytes:
                lines.append(self._cut(raw))
            else:
                lines.append(clean_text(raw))
        rest = data[start:]
        if self._skipping:
            start = len(data)
        elif len(rest) > self.max_line_bytes:
            lines.append(self._cut(rest))
            self._skipping, start = True, len(data)
        elif final and rest and len(data) == size - self.offset:
            lines.append(clean_text(rest))
            start = len(data)
        self.offset += start
        return lines

    def drain(self) -> list[str]:
        """Every line left in the file, the last one even without its newline."""
        lines: list[str] = []
        while batch := self.read_lines(final=True):
            lines += batch
        return lines


class Ingestor:
    """Everything an attempt's ranks write, from files to rows (one instance per attempt)."""

    def __init__(
        self,
        engine: Engine,
        ref: AttemptRef,
        *,
        log_dir: Path,
        events_file: Path,
        max_line_bytes: int,
        on_checkpoint: Callable[[CheckpointEvent], None],
        max_log_bytes: int | None = None,
        log_metrics: Sequence[str] = (),
        marker: AttemptMarker | None = None,
    ) -> None:
        """`log_metrics`: the spec's patterns, matched against rank 0's log lines; `marker`:
        the attempt's goodput marks, kept from the events file and stored with the output."""
        self.engine = engine
        # Log lines name their node: 0 for a single-node job.
        self.node = ref.node or 0
        self.job_id, self.attempt = ref.job_id, ref.attempt
        self.log_dir = log_dir
        self.max_line_bytes = max_line_bytes
        self.max_log_bytes = max_log_bytes
        self.events = LineReader(events_file, max_line_bytes=1 << 20)
        self.rank_logs: dict[int, LineReader] = {}
        self.on_checkpoint = on_checkpoint
        self.log_metrics = LogMetrics(log_metrics)
        self.invalid_events = 0
        # The first few reasons ("line N: why"), for the job's logs and message.
        self.invalid_reasons: list[str] = []
        self.events_lines = 0
        self.metric_points_seen = 0
        self.last_event_at = time.monotonic()
        self._events_size = 0
        self.log_lines_seen = 0
        self.superseded = False
        self._logs: list[NewLogLine] = []
        self._points: list[NewMetricPoint] = []
        self._progress: dict[str, Any] = {}
        # The recent step rate, and the total it is heading for: the job's ETA.
        self.step_rate = StepRate()
        self.total_steps: int | None = None
        self._next_read = 0.0
        # An event stream watches the job: read and store every poll.
        self.live = False
        self.marker = marker or AttemptMarker(time.time())
        self._marks_due = 0.0

    def _discover_rank_logs(self) -> None:
        try:
            names = os.listdir(self.log_dir)
        except FileNotFoundError:
            return
        for name in names:
            rank = rank_files.LOG.rank_of(name)
            if rank is not None and rank not in self.rank_logs:
                self.rank_logs[rank] = LineReader(self.log_dir / name, self.max_line_bytes)

    def _read(self, final: bool) -> None:
        now = time.time()
        self._discover_rank_logs()
        for rank, reader in sorted(self.rank_logs.items()):
            lines = reader.drain() if final else reader.read_lines()
            self._logs += [
                NewLogLine(rank=rank, ts=now, line=line, node=self.node) for line in lines
            ]
            self.log_lines_seen += len(lines)
            if rank == 0 and self.log_metrics and lines:
                printed = self.log_metrics.points(lines, now)
                self.metric_points_seen += len(printed)
                self._points += printed
                for point in printed:
                    self._note_step(point.step, point.ts, now)
        lines = self.events.drain() if final else self.events.read_lines()
        for line in lines:
            self.events_lines += 1
            try:
                event = parse_event_line(line)
            except InvalidEvent as exc:
                self.invalid_events += 1
                log.warning("job %s: skipped events line (%s): %.200s", self.job_id, exc, line)
                self._note_invalid(self.events_lines, exc, now)
                continue
            if isinstance(event, SpanEvent):
                self.marker.span(event, now)
                continue
            if isinstance(event, MetricEvent):
                self.marker.metric(event.ts, now)
                new_points = metric_points(event, now)
                self.metric_points_seen += len(new_points)
                self._points += new_points
                if event.total_steps is not None:
                    self._progress["total_steps"] = self.total_steps = event.total_steps
                self._note_step(event.step, event.ts, now)
            else:
                self.on_checkpoint(event)

    def _note_step(self, step: int | None, ts: float | None, now: float) -> None:
        """The job's ETA after a point of `step` (`worker.step_rate`)."""
        if self.step_rate.observe(step, ts, now):
            estimate = self.step_rate.estimate(self.total_steps)
            self._progress["eta_s"] = None if estimate is None else estimate.eta_s
            self._progress["eta_at"] = None if estimate is None else estimate.at

    def _note_invalid(self, number: int, exc: InvalidEvent, now: float) -> None:
        """The first few reasons go to rank 0's log, where the job's user reads."""
        if len(self.invalid_reasons) >= MAX_INVALID_REASONS:
            return
        reason = f"line {number}: {str(exc)[:300]}"
        self.invalid_reasons.append(reason)
        line = f"[launchbay] events file {reason} (skipped)"
        self._logs.append(NewLogLine(rank=0, ts=now, line=line, node=self.node))

    def _store(self, final: bool = False) -> bool:
        try:
            while self._logs or self._points:
                logs = self._logs[:BATCH_ROWS]
                points = self._points[: BATCH_ROWS - len(logs)]
                last = len(points) == len(self._points)
                with session_scope(self.engine) as session:
                    # The marks go with the output, in its transaction (committed there).
                    marked = last and self._write_marks(session.connection())
                    append_output(
                        session,
                        self.job_id,
                        self.attempt,
                        logs=logs,
                        points=points,
                        progress=self._progress if last else None,
                        max_log_bytes=self.max_log_bytes,
                    )
                if marked:
                    self._marks_stored()
                del self._logs[: len(logs)]
                del self._points[: len(points)]
            self._progress = {}
            self.store_marks(final=final)
        except AttemptSuperseded:
            log.warning("job %s: attempt %d superseded; output dropped", self.job_id, self.attempt)
            self.superseded = True
            self._logs, self._points, self._progress = [], [], {}
        except SQLAlchemyError:
            log.warning("job %s: storing logs/metrics failed; retrying", self.job_id, exc_info=True)
            return False
        return True

    def store_marks(self, *, final: bool = False) -> None:
        """Write the attempt's goodput marks when they changed and no output took them, at
        most every `STORE_EVERY_S` unless `final` (the database refusing, they are kept)."""
        if not final and time.monotonic() < self._marks_due:
            return
        try:
            with session_scope(self.engine) as session:
                if self._write_marks(session.connection()):
                    session.commit()
                    self._marks_stored()
        except SQLAlchemyError as exc:
            log.warning("job %s: goodput marks not stored (kept): %s", self.job_id, exc)

    def _write_marks(self, connection: Connection) -> bool:
        """The marks into the attempt's row, if they changed (not committed)."""
        if not self.marker.dirty:
            return False
        marks = self.marker.marks()
        save_attempt_marks(connection, self.job_id, self.attempt, self.node, marks)
        return True

    def _marks_stored(self) -> None:
        self.marker.dirty = False
        self._marks_due = time.monotonic() + STORE_EVERY_S

    def _watch_events_file(self) -> None:
        """Note when rank 0 last appended to its events file (read or not: the hang watchdog
        must not fire because the database is slow)."""
        try:
            size = self.events.path.stat().st_size
        except FileNotFoundError:
            return
        if size != self._events_size:
            self._events_size = size
            self.last_event_at = time.monotonic()
            self.marker.progress(time.time())

    def flush(self) -> bool:
        """Read and store what is new now, whatever the pace: before an elastic restart is
        recorded, so what the ranks wrote before it comes before its event."""
        if self.superseded:
            return True
        if (self._logs or self._points) and not self._store():
            return False
        self._read(final=False)
        return self._store()

    def poll(self, *, final: bool = False) -> bool:
        """Read what is new and store it; False when the database refused (kept for next time)."""
        if self.superseded:
            return True
        self._watch_events_file()
        if not self._logs and not self._points:
            now = time.monotonic()
            if not final and not self.live and now < self._next_read:
                return True
            seen = self.log_lines_seen + self.events_lines
            self._read(final)
            if self.log_lines_seen + self.events_lines > seen:
                self._next_read = now + STORE_EVERY_S
        elif final:
            self._store()
            self._read(final)
        return self._store(final)
