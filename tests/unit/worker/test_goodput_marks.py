"""The goodput marks of an attempt as the worker gathers them from the events file: the lines
of the protocol, and what a program that writes nonsense can do (nothing beyond its own
ledger; bounded work and one row whatever it writes)."""

import json
from typing import Any

import pytest

from jobs.contract.events import SpanEvent, span_line
from worker.events import CheckpointEvent, InvalidEvent, parse_event_line
from worker.goodput_marks import MAX_COUNT, AttemptMarker

START = 1_750_000_000.0


def line(**obj: Any) -> str:
    return json.dumps(obj)


def test_span_lines_round_trip_and_a_checkpoint_line_keeps_its_time() -> None:
    written = span_line("checkpoint_save", START, START + 2.5, step=40)
    assert parse_event_line(json.dumps(written)) == SpanEvent(
        "checkpoint_save", START, START + 2.5, 40
    )
    assert parse_event_line(line(type="eval", start=1, end=1)) == SpanEvent("eval", 1.0, 1.0)
    event = parse_event_line(line(type="checkpoint", path="a.pt", ts=START + 3))
    assert event == CheckpointEvent("a.pt", None, None, {}, ts=START + 3)
    with pytest.raises(ValueError):
        span_line("lunch", 0, 1)


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "checkpoint_save", "start": 10, "end": 9},  # ends before it starts
        {"type": "eval", "start": "soon", "end": 9},
        {"type": "eval", "start": 1},
        {"type": "eval", "start": 1, "end": 1e400},
        {"type": "checkpoint_save", "start": True, "end": 2},
        {"type": "checkpoint", "path": "a.pt", "ts": "now"},
    ],
)
def test_a_mark_that_breaks_the_format_is_invalid(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidEvent):
        parse_event_line(json.dumps(bad).replace("1e+400", "1e400"))


def test_spans_count_the_time_they_cover_inside_the_attempt_once() -> None:
    marker = AttemptMarker(START)
    now = START + 100
    marker.span(SpanEvent("checkpoint_save", START + 10, START + 12), now)
    marker.span(SpanEvent("checkpoint_save", START + 11, START + 13), now)  # overlaps: +1
    marker.span(SpanEvent("checkpoint_save", START + 10, START + 12), now)  # again: +0
    marker.span(SpanEvent("checkpoint_save", START + 5, START + 6), now)  # out of order: +0
    marker.span(SpanEvent("eval", START - 1e9, START + 1e12), now)  # clipped to [start, now]
    marks = marker.marks()
    assert (marks.checkpoint_stall_s, marks.checkpoint_saves) == (3.0, 4)
    assert (marks.eval_s, marks.evals) == (100.0, 1)


def test_times_from_the_program_are_kept_inside_the_attempt() -> None:
    marker = AttemptMarker(START)
    marker.metric(START - 50, START + 5)
    marker.metric(START + 3, START + 6)  # only the first metric ends the first step
    marker.checkpoint_registered(START + 1e15, START + 7)
    marker.checkpoint_registered(START + 2, START + 8)  # an earlier save does not go back
    marker.stopped(START + 9, hang_since=START - 3)
    marks = marker.marks()
    assert marks.first_step_at == START
    assert marks.last_checkpoint_at == START + 7
    assert (marks.ended_at, marks.hang_since) == (START + 9, START)


def test_a_flood_of_marks_is_bounded_work_and_one_row() -> None:
    marker = AttemptMarker(START)
    now = START + 10
    for i in range(200_000):
        marker.span(SpanEvent("eval", START + i % 7, START + i % 7 + 100), now)
    marks = marker.marks()
    assert marks.eval_s == 10.0 and marks.evals == 200_000
    assert len(vars(marker)) == len(vars(AttemptMarker(START)))  # no state grows with them
    marker.counts["eval"] = MAX_COUNT
    marker.span(SpanEvent("eval", START, START), now)
    assert marker.marks().evals == MAX_COUNT  # what the row's column holds
