"""Rank 0's events file: the one protocol between training code and Launchbay.

One JSON object per line, appended to $LAUNCHBAY_EVENTS_FILE, which the worker tails:

    {"type": "metric", "step": 120, "epoch": 1, "metrics": {"loss": 0.31}, "ts": 1732200000.1}
    {"type": "checkpoint", "path": "step-000000120.pt", "step": 120, "epoch": 1, ...}

Only rank 0 writes, so a metric appears once however many ranks there are. The file is
opened once (append mode, unbuffered) and lines go out in single write() calls. By default
report() writes its line before it returns, so nothing reported is lost however the rank
ends; that costs about 0.1 ms a call between training steps (encoding, the system call).
After `queue_reports(0.05)`, report() only queues its line and a thread of the writer writes
the queue every 0.05 s, while torch's operations leave the interpreter free; a rank killed
outright loses what is queued then (it is written on leaving `distributed()` and at a
normal exit). Any other line (`write_event`, a checkpoint's) is written at once, after what
is queued, so the file keeps the order of the calls. A bad metric value is dropped with a
warning: it must never stop a training run.
"""

from __future__ import annotations

import atexit
import json
import math
import numbers
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch

from jobs.contract.events import metric_line
from jobs.runtime import env
from jobs.runtime.distributed import DistContext, at_teardown, current_context, get_rank

Number = int | float

# One encoder for every line: json.dumps() would build one per call with these options.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class EventWriter:
    """Appends JSON lines to one file, keeping it open between writes; with `flush_s`, the
    lines given to `queue` are written by a thread of its own every `flush_s` seconds."""

    def __init__(self, path: str | os.PathLike[str], flush_s: float | None = None) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.flush_s = flush_s
        self._file: BinaryIO | None = None
        self._queued: deque[Mapping[str, Any]] = deque()  # appended and popped atomically
        self._lock = threading.Lock()  # held to write: lines go out in order
        self._stop = threading.Event()
        self._flusher_pid = 0  # the process whose thread writes the queue
        self.context: DistContext | None = None  # the distributed() it was last found in

    def write(self, event: Mapping[str, Any]) -> None:
        """Write `event` now, after what is queued."""
        with self._lock:
            self._write_locked([*self._take_queued(), event])

    def queue(self, event: Mapping[str, Any]) -> None:
        """Write `event` within `flush_s` seconds (at once without a `flush_s`)."""
        if self.flush_s is None:
            self.write(event)
            return
        self._queued.append(event)
        if self._flusher_pid != os.getpid():
            self._start_flusher()

    def flush(self) -> None:
        with self._lock:
            self._write_locked(self._take_queued())

    def close(self) -> None:
        self._stop.set()
        self._flusher_pid = 0  # a later queue() starts a thread again
        with self._lock:
            self._write_locked(self._take_queued())
            if self._file is not None:
                self._file.close()
                self._file = None

    def _take_queued(self) -> list[Mapping[str, Any]]:
        return [self._queued.popleft() for _ in range(len(self._queued))]

    def _write_locked(self, events: list[Mapping[str, Any]]) -> None:
        if not events:
            return
        data = "".join([_ENCODER.encode(event) + "\n" for event in events]).encode("utf-8")
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)
        self._file.write(data)

    def _start_flusher(self) -> None:
        self._flusher_pid = os.getpid()
        self._stop = threading.Event()
        thread = threading.Thread(target=self._flush_every, name="launchbay-events", daemon=True)
        thread.start()

    def _flush_every(self) -> None:
        assert self.flush_s is not None
        while not self._stop.wait(self.flush_s):
            try:
                self.flush()
            except OSError as exc:  # those lines are lost; training goes on
                warnings.warn(
                    f"metric lines not written to {self.name}: {exc}", RuntimeWarning, stacklevel=1
                )


_writer: EventWriter | None = None
_warned: set[str] = set()
_flush_s: float | None = None  # see queue_reports()


def queue_reports(flush_s: float | None = 0.05) -> None:
    """From now on, report() queues its lines and a thread writes them every `flush_s`
    seconds (None: each line is written before report() returns, the default).

    For reporting many metrics every step: it cuts what reporting costs the training loop
    to about a third (docs/benchmarks.md, P4a″). The price: lines still queued when the rank
    is killed outright are lost.
    """
    global _flush_s
    if flush_s is not None and not 0 < flush_s <= 10:
        raise ValueError(f"flush_s must be over 0 and at most 10 seconds, got {flush_s}")
    _flush_s = flush_s


def _current_writer() -> EventWriter | None:
    """The writer for the events file named in the environment, if there is one.

    Inside distributed() the environment is read once: a writer made in a context serves
    the whole context (report() asks every step, and reading os.environ costs more than the
    rest of finding the writer). Outside one it is read on every call.
    """
    global _writer
    ctx = current_context()
    if ctx is not None and _writer is not None and _writer.context is ctx:
        if _writer.flush_s == _flush_s:
            return _writer
    path = env.events_file()
    if path is None:
        return None
    if _writer is None or _writer.name != path or _writer.flush_s != _flush_s:
        if _writer is not None:
            _writer.close()
        _writer = EventWriter(path, _flush_s)
    _writer.context = ctx
    return _writer


def close_events() -> None:
    """Write what is queued and close the events file (it is reopened on the next write)."""
    global _writer
    if _writer is not None:
        _writer.close()
        _writer = None


def _forget_writer() -> None:
    """In a forked child: the parent's writer, its queue and lock are the parent's."""
    global _writer
    _writer = None


atexit.register(close_events)
at_teardown(close_events)
os.register_at_fork(after_in_child=_forget_writer)


def _as_number(value: object) -> Number | None:
    # Exact floats and ints first: the common case, and the abstract checks below are slow.
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None  # type: ignore[arg-type,return-value]
    if kind is int:
        return value  # type: ignore[return-value]
    if isinstance(value, bool):
        return None
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            return None
        return _as_number(value.detach().item())
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def clean_metrics(metrics: Mapping[str, object]) -> dict[str, Number]:
    """Finite numbers only; one-element tensors and NumPy scalars become Python numbers.

    Anything else (NaN, inf, strings, None, larger tensors) is left out with a warning
    once per metric name, because the events file holds JSON numbers and a diverged loss
    must not crash the run that reports it.
    """
    clean: dict[str, Number] = {}
    for name, value in metrics.items():
        # Inlined for finite floats, what report() gets nearly always (a call costs here).
        if type(value) is float and math.isfinite(value):
            clean[str(name)] = value
            continue
        number = _as_number(value)
        if number is None:
            if name not in _warned:
                _warned.add(name)
                warnings.warn(
                    f"metric {name!r} skipped: {value!r} is not a finite number",
                    RuntimeWarning,
                    stacklevel=3,
                )
            continue
        clean[str(name)] = number
    return clean


def write_event(event: Mapping[str, Any]) -> bool:
    """Append one event line (rank 0 only); adds `ts` when missing. True if a line was written.

    For event types the SDK has no helper for; save_checkpoint() uses it too. Written at
    once, after the metric lines report() may have queued.
    """
    if get_rank() != 0:
        return False
    if "ts" not in event:
        event = {**event, "ts": time.time()}
    writer = _current_writer()
    if writer is None:
        return False
    writer.write(event)
    return True


def report(
    step: int, epoch: int | None = None, *, total_steps: int | None = None, **metrics: object
) -> None:
    """Record `metrics` at optimizer step `step` (rank 0 writes; other ranks return at once).

    Give values already averaged over ranks (see reduce_mean) where they differ per rank.
    `total_steps`, when known, goes into the line too, so Launchbay can show progress.
    A no-op when LAUNCHBAY_EVENTS_FILE is unset or no value is a finite number.
    """
    if get_rank() != 0:
        return
    clean = clean_metrics(metrics)
    if not clean:
        return
    total = None if total_steps is None else int(total_steps)
    event = metric_line(int(step), epoch, clean, total_steps=total, ts=time.time())
    writer = _current_writer()  # the rank is checked above
    if writer is not None:
        writer.queue(event)
