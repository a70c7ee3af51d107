"""Rank 0's events file: the one protocol between training code and Launchbay.

One JSON object per line, appended to $LAUNCHBAY_EVENTS_FILE, which the worker tails:

    {"type": "metric", "step": 120, "epoch": 1, "metrics": {"loss": 0.31}, "ts": 1732200000.1}
    {"type": "checkpoint", "path": "step-000000120.pt", "step": 120, "epoch": 1, ...}

Only rank 0 writes, so a metric appears once however many ranks there are. The file is
opened once (append mode, unbuffered) and every line goes out in a single write() call, so
the worker never reads half a line from us and report() stays cheap enough to call every
step. A bad metric value is dropped with a warning: it must never stop a training run.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch

from jobs.runtime import env
from jobs.runtime.distributed import get_rank

Number = int | float

# One encoder for every line: json.dumps() would build one per call with these options.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class EventWriter:
    """Appends JSON lines to one file, keeping it open between writes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = str(path)
        self._file: BinaryIO | None = None

    def write(self, event: Mapping[str, Any]) -> None:
        line = _ENCODER.encode(event) + "\n"
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "ab", buffering=0)
        self._file.write(line.encode("utf-8"))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


_writer: EventWriter | None = None
_warned: set[str] = set()


def _current_writer() -> EventWriter | None:
    """The writer for the events file named in the environment now, if there is one."""
    global _writer
    path = env.events_file()
    if path is None:
        return None
    if _writer is None or _writer.name != path:
        if _writer is not None:
            _writer.close()
        _writer = EventWriter(path)
    return _writer


def close_events() -> None:
    """Close the events file (it is reopened on the next write)."""
    global _writer
    if _writer is not None:
        _writer.close()
        _writer = None


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

    For event types the SDK has no helper for; report() and save_checkpoint() use it too.
    """
    if get_rank() != 0:
        return False
    if "ts" not in event:
        event = {**event, "ts": time.time()}
    return _append(event)


def _append(event: Mapping[str, Any]) -> bool:
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
    event: dict[str, Any] = {"type": "metric", "step": int(step), "epoch": epoch, "metrics": clean}
    if total_steps is not None:
        event["total_steps"] = int(total_steps)
    event["ts"] = time.time()
    _append(event)  # the rank is checked above
