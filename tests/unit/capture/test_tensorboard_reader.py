"""Rank 0's TensorBoard reader: event files under the job's directories become metric lines
at their step and wall time, once, within the job's limit, whatever the files hold."""

import json
import os
from pathlib import Path

import pytest

from jobs.capture import tensorboard
from jobs.capture.tensorboard import MAX_PER_LINE, TensorBoardReader, find_event_files
from jobs.capture.tfevents import encode_record, encode_scalar_event

NAME = "events.out.tfevents.1.host.1.0"


def write_scalars(path: Path, scalars: list[tuple[str, float, int]], ts: float = 1000.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as out:
        for number, (tag, value, step) in enumerate(scalars):
            out.write(encode_record(encode_scalar_event(tag, value, step, ts + number)))


def read_lines(events: Path) -> list[dict[str, object]]:
    if not events.exists():
        return []
    return [json.loads(line) for line in events.read_text().splitlines()]


def reader(tmp_path: Path, **kw: object) -> tuple[TensorBoardReader, Path, list[str]]:
    notes: list[str] = []
    events = tmp_path / "events.jsonl"
    state = tmp_path / "ckpt" / ".launchbay-tensorboard.json"
    state.parent.mkdir(exist_ok=True)
    skip = kw.pop("skip", lambda d: False)
    made = TensorBoardReader([tmp_path / "work"], events, state, skip, notes.append, **kw)
    return made, events, notes


def test_scalars_become_lines_grouped_by_step_read_once(tmp_path: Path) -> None:
    write_scalars(tmp_path / "work" / "runs" / NAME, [("loss", 0.5, 1), ("acc", 0.7, 1)])
    tb, events, notes = reader(tmp_path)
    assert tb.pass_once() == 2
    assert read_lines(events) == [
        {
            "type": "metric",
            "step": 1,
            "metrics": {"loss": 0.5, "acc": 0.699999988079071},
            "ts": 1000.0,
        }
    ]
    assert tb.pass_once() == 0  # nothing new
    write_scalars(tmp_path / "work" / "runs" / NAME, [("loss", 0.25, 2)], ts=2000.0)
    assert tb.pass_once() == 1
    assert read_lines(events)[-1] == {
        "type": "metric",
        "step": 2,
        "metrics": {"loss": 0.25},
        "ts": 2000.0,
    }
    assert notes == []


def test_a_retried_attempt_reads_on_where_the_earlier_one_stopped(tmp_path: Path) -> None:
    path = tmp_path / "work" / NAME
    write_scalars(path, [("loss", 1.0, 1)])
    first, events, _ = reader(tmp_path)
    first.pass_once()
    write_scalars(path, [("loss", 0.5, 2)])
    second, _, _ = reader(tmp_path)
    second.pass_once()
    assert [line["step"] for line in read_lines(events)] == [1, 2]


def test_add_scalars_directories_name_their_series(tmp_path: Path) -> None:
    write_scalars(tmp_path / "work" / "runs" / "run_14h_xsinx" / NAME, [("run_14h", 1.0, 0)])
    write_scalars(tmp_path / "work" / "runs" / "run_14h_tanx" / NAME, [("run_14h", 2.0, 0)])
    tb, events, _ = reader(tmp_path)
    tb.pass_once()
    names = {name for line in read_lines(events) for name in line["metrics"]}
    assert names == {"run_14h/xsinx", "run_14h/tanx"}


def test_what_the_events_file_cannot_hold_is_skipped_and_said_once(tmp_path: Path) -> None:
    bad = [("neg", 1.0, -1), ("n" * 129, 1.0, 1), ("nan", float("nan"), 1), ("big", 1.0, 2**31)]
    write_scalars(tmp_path / "work" / NAME, [*bad, *bad, ("ok", 1.0, 3)])
    tb, events, notes = reader(tmp_path)
    assert tb.pass_once() == 1
    assert [line["metrics"] for line in read_lines(events)] == [{"ok": 1.0}]
    assert len(notes) == 3, notes  # steps, names, values: once each


def test_tags_under_launchbay_s_system_prefix_are_left_out_not_the_step(tmp_path: Path) -> None:
    scalars = [("system/gpu0/utilization_percent", 3.0, 1), ("loss", 0.5, 1)]
    write_scalars(tmp_path / "work" / NAME, scalars)
    tb, events, notes = reader(tmp_path)
    tb.pass_once()
    assert [line["metrics"] for line in read_lines(events)] == [{"loss": 0.5}]
    assert len(notes) == 1 and "'system/'" in notes[0]


def test_many_scalars_of_one_step_are_split_into_bounded_lines(tmp_path: Path) -> None:
    write_scalars(tmp_path / "work" / NAME, [(f"t{i}", 1.0, 7) for i in range(2500)])
    tb, events, _ = reader(tmp_path)
    assert tb.pass_once() == 2500
    sizes = [len(line["metrics"]) for line in read_lines(events)]
    assert sizes == [MAX_PER_LINE, MAX_PER_LINE, 500]


def test_the_job_limit_holds_across_attempts_and_is_said(tmp_path: Path) -> None:
    write_scalars(tmp_path / "work" / NAME, [("loss", 1.0, s) for s in range(30)])
    tb, events, notes = reader(tmp_path, max_points=10)
    assert tb.pass_once() == 10
    assert tb.pass_once() == 0
    again, _, more = reader(tmp_path, max_points=10)
    assert again.pass_once() == 0
    assert len(read_lines(events)) == 10
    assert len(notes) == 1 and "limit of 10" in notes[0]


def test_a_damaged_file_stops_there_and_others_are_still_read(tmp_path: Path) -> None:
    damaged = tmp_path / "work" / "a" / NAME
    write_scalars(damaged, [("a", 1.0, 1)])
    with damaged.open("ab") as out:
        out.write(b"\xff" * 64)
    write_scalars(tmp_path / "work" / "b" / NAME, [("b", 1.0, 1)])
    tb, events, notes = reader(tmp_path)
    assert tb.pass_once() == 2
    write_scalars(damaged, [("a", 2.0, 2)])  # after the damage: never read
    assert tb.pass_once() == 0
    assert len(notes) == 1 and "damaged" in notes[0]


def test_skipped_directories_links_and_hidden_ones_are_not_read(tmp_path: Path) -> None:
    work = tmp_path / "work"
    write_scalars(work / "framework" / "run" / NAME, [("dup", 1.0, 1)])
    write_scalars(work / ".hidden" / NAME, [("hidden", 1.0, 1)])
    outside = tmp_path / "secret"
    write_scalars(outside / NAME, [("secret", 1.0, 1)])
    (work / "link").symlink_to(outside)
    (work / "file-link").mkdir()
    os.symlink(outside / NAME, work / "file-link" / NAME)
    write_scalars(work / "mine" / NAME, [("mine", 1.0, 1)])
    skipped = str((work / "framework").resolve())
    tb, events, _ = reader(tmp_path, skip=lambda d: str(d) == skipped)
    tb.pass_once()
    assert [line["metrics"] for line in read_lines(events)] == [{"mine": 1.0}]


def test_a_skipped_directory_is_remembered_for_a_later_attempt(tmp_path: Path) -> None:
    tb, _, _ = reader(tmp_path)
    tb.remember_skip("/somewhere/runs")
    later, _, _ = reader(tmp_path)
    assert later.skipped == {"/somewhere/runs"}


def test_what_an_attempt_wrote_to_its_working_dir_is_not_read_again_under_the_output_dir(
    tmp_path: Path,
) -> None:
    """The worker keeps an attempt's working directory under the output dir (same paths): the
    next attempt, in a working directory of its own, reads neither those files again nor a
    directory a framework reported from."""
    events, state = tmp_path / "events.jsonl", tmp_path / "ckpt" / "state.json"
    state.parent.mkdir()
    first, output = tmp_path / "attempt-1", tmp_path / "output"
    write_scalars(first / "runs" / NAME, [("loss", 0.5, 1)])
    write_scalars(first / "model" / "runs" / "x" / NAME, [("train/loss", 0.5, 1)])
    tb = TensorBoardReader([first, output], events, state, lambda d: False, print)
    tb.remember_skip(str(first / "model" / "runs"))
    assert tb.pass_once() == 1
    first.rename(output)  # kept, as `worker.workdir` does
    write_scalars(output / "runs" / NAME, [("loss", 0.25, 2)])  # as if written later
    second = tmp_path / "attempt-2"
    second.mkdir()
    later = TensorBoardReader([second, output], events, state, lambda d: False, print)
    assert later.pass_once() == 1  # step 2 only
    assert [line["metrics"] for line in read_lines(events)] == [{"loss": 0.5}, {"loss": 0.25}]


def test_the_walk_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A working directory of many files costs a bounded walk, said once."""
    work = tmp_path / "work"
    for i in range(30):
        (work / f"d{i}").mkdir(parents=True)
    write_scalars(work / "d9" / NAME, [("loss", 1.0, 1)])
    assert find_event_files([work], lambda d: False) == ([work / "d9" / NAME], False)
    monkeypatch.setattr(tensorboard, "MAX_WALK_ENTRIES", 10)
    found, cut = find_event_files([work], lambda d: False)
    assert cut and len(found) <= 1
    tb, _, notes = reader(tmp_path)
    tb.pass_once()
    tb.pass_once()
    assert len(notes) == 1 and "first 10 entries" in notes[0]
