"""Goodput marks written in the ranks: `save_checkpoint`'s own save span before its checkpoint
line, `evaluating()`, and the spans a framework's hooks open and close (`TrainerPhases`, what
the transformers callback calls), all parsed back by the worker's parser."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from torch import nn

from jobs.contract.events import CheckpointEvent, SpanEvent, parse_event_line
from jobs.integrations.phases import TrainerPhases
from jobs.runtime import close_events, env, evaluating, save_checkpoint


@pytest.fixture
def events_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(env.CHECKPOINT_DIR, str(tmp_path / "ckpt"))
    path = tmp_path / "events.jsonl"
    monkeypatch.setenv(env.EVENTS_FILE, str(path))
    return path


def events(path: Path) -> list[object]:
    close_events()
    return [parse_event_line(line) for line in path.read_text().splitlines()]


class SlowState:
    def state_dict(self) -> dict[str, int]:
        time.sleep(0.2)
        return {}


def test_a_save_is_marked_before_its_checkpoint_line_which_says_when_it_ended(
    events_file: Path,
) -> None:
    began = time.time()
    save_checkpoint(nn.Linear(2, 1), None, SlowState(), step=4, epoch=0)
    span, checkpoint = events(events_file)
    assert isinstance(span, SpanEvent) and isinstance(checkpoint, CheckpointEvent)
    assert (span.kind, span.step) == ("checkpoint_save", 4)
    assert began <= span.start and span.end - span.start >= 0.2
    assert checkpoint.ts is not None and span.end <= checkpoint.ts <= time.time()


def test_an_evaluation_is_marked_even_when_it_raises(events_file: Path) -> None:
    with evaluating(7):
        time.sleep(0.05)
    with pytest.raises(RuntimeError), evaluating(8):
        raise RuntimeError("eval failed")
    first, second = events(events_file)
    assert isinstance(first, SpanEvent) and first.kind == "eval" and first.step == 7
    assert first.end - first.start >= 0.05
    assert isinstance(second, SpanEvent) and second.step == 8


def test_trainer_hooks_mark_the_evaluation_then_the_save_it_announced(events_file: Path) -> None:
    phases = TrainerPhases()
    phases.step_ended(will_evaluate=True, will_save=True)
    time.sleep(0.05)
    phases.evaluated(10, will_save=True)
    time.sleep(0.05)
    phases.saved(10)
    phases.saved(11)  # a save nobody announced: no span
    phases.predicting()  # trainer.evaluate() called by the program
    phases.evaluated(12, will_save=False)
    lines = events(events_file)
    assert [(e.kind, e.step) for e in lines if isinstance(e, SpanEvent)] == [
        ("eval", 10),
        ("checkpoint_save", 10),
        ("eval", 12),
    ]
    evaluation, save = lines[0], lines[1]
    assert isinstance(evaluation, SpanEvent) and isinstance(save, SpanEvent)
    assert save.start >= evaluation.end  # the save is timed from the evaluation's end
    assert json.loads(events_file.read_text().splitlines()[0])["type"] == "eval"
