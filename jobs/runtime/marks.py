"""Goodput marks (docs/goodput.md): the spans in which the training loop is blocked saving a
checkpoint or evaluating, written by rank 0 to the events file when each ends:

    with lb.evaluating(step):
        val_loss = evaluate(model, val_loader)

`save_checkpoint` marks its own saves. The framework integrations mark theirs through
`start_mark` and `end_mark`, whose start and end come from different hooks.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from jobs.contract.events import CHECKPOINT_SAVE, EVAL, span_line
from jobs.runtime.distributed import get_rank
from jobs.runtime.events import write_event

__all__ = [
    "CHECKPOINT_SAVE",
    "EVAL",
    "drop_mark",
    "end_mark",
    "evaluating",
    "is_marking",
    "marked",
    "start_mark",
]

_open: dict[str, float] = {}


def start_mark(kind: str, at: float | None = None) -> None:
    """A span of `kind` starts now (or `at`); a later start replaces one not ended yet."""
    _open[kind] = time.time() if at is None else at


def drop_mark(kind: str) -> None:
    """Forget the span of `kind` started last, writing nothing."""
    _open.pop(kind, None)


def is_marking(kind: str) -> bool:
    """Whether a span of `kind` started and has not ended."""
    return kind in _open


def end_mark(kind: str, step: int | None = None) -> bool:
    """The span of `kind` started last ends now: its line is written (rank 0). False when no
    span of that kind was open."""
    start = _open.pop(kind, None)
    if start is None or get_rank() != 0:
        return False
    return write_event(span_line(kind, start, max(start, time.time()), step))


@contextmanager
def marked(kind: str, step: int | None = None) -> Iterator[None]:
    """The block is a span of `kind` (also when it raises)."""
    start_mark(kind)
    try:
        yield
    finally:
        end_mark(kind, step)


def evaluating(step: int | None = None) -> AbstractContextManager[None]:
    """The block is an evaluation: ``with lb.evaluating(step): ...``."""
    return marked(EVAL, step)
