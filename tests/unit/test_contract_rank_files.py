"""The files a rank leaves in its log directory: each name built and parsed back, the error
record and the finished record written and read back."""

import fnmatch
import json
from dataclasses import fields
from pathlib import Path

import pytest

from jobs.contract import rank_files
from jobs.contract.rank_files import (
    ERROR,
    FINISHED,
    GROUP,
    LOG,
    ErrorRecord,
    read_error_records,
    read_finished,
    write_error_record,
    write_finished,
)

KINDS = [LOG, ERROR, FINISHED, GROUP]


def test_the_names_are_the_ones_on_disk() -> None:
    assert [kind.name(3) for kind in KINDS] == [
        "rank-3.log",
        "rank-3.error.json",
        "rank-3.finished",
        "rank-3.group",
    ]
    assert LOG.path(Path("/logs"), 12) == Path("/logs/rank-12.log")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rank", [0, 7, 123])
def test_each_name_parses_back_to_its_rank(kind: rank_files.RankFile, rank: int) -> None:
    name = kind.name(rank)
    assert kind.rank_of(name) == rank
    assert fnmatch.fnmatchcase(name, kind.glob)
    assert [other.rank_of(name) for other in KINDS if other != kind] == [None] * 3


@pytest.mark.parametrize(
    "name",
    ["rank-.log", "rank-x.log", "rank-1.log.tmp", ".rank-1.log", "rank-1-log", "launcher.log"],
)
def test_other_names_are_no_rank_log(name: str) -> None:
    assert LOG.rank_of(name) is None


def test_ranks_in_a_listing() -> None:
    names = ["rank-0.log", "rank-1.log", "rank-1.error.json", "launcher.log", "rank-2.group"]
    assert LOG.ranks_in(names) == {0: "rank-0.log", 1: "rank-1.log"}
    assert GROUP.ranks_in(names) == {2: "rank-2.group"}


def record(rank: int = 2, restart: int = 1) -> ErrorRecord:
    return ErrorRecord(
        rank=rank,
        exit_code=1,
        error="RuntimeError: boom",
        traceback="Traceback ...\nRuntimeError: boom\n",
        ts=1732200000.5,
        local_rank=rank % 2,
        restart=restart,
        pid=4242,
    )


def test_an_error_record_round_trips() -> None:
    written = record()
    text = written.to_json()
    assert ErrorRecord.from_json(text) == written
    # Every field is written, in the order the files have always had.
    assert list(json.loads(text)) == [
        "rank",
        "local_rank",
        "restart",
        "pid",
        "exit_code",
        "error",
        "traceback",
        "ts",
    ]
    assert set(json.loads(text)) == {f.name for f in fields(ErrorRecord)}


def test_an_error_record_needs_only_its_rank() -> None:
    assert ErrorRecord.from_json('{"rank": 4}') == ErrorRecord(4, 1, "", "", 0.0)
    for bad in ('{"error": "x"}', "[1]", '{"rank": null}', '{"rank": "x"}', "not json"):
        with pytest.raises(ValueError):
            ErrorRecord.from_json(bad)


def test_error_records_are_written_then_read_back_by_restart(tmp_path: Path) -> None:
    assert write_error_record(tmp_path, record(2, restart=1), writer="sdk") == (
        tmp_path / "rank-2.error.json"
    )
    write_error_record(tmp_path, record(3, restart=0))
    (tmp_path / "rank-4.error.json").write_text("{broken")
    assert read_error_records(tmp_path, 1) == {2: record(2, restart=1)}
    assert read_error_records(tmp_path, 0) == {3: record(3, restart=0)}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rank-2.error.json",
        "rank-3.error.json",
        "rank-4.error.json",
    ]


def test_the_finished_record_round_trips(tmp_path: Path) -> None:
    write_finished(tmp_path, 5, 2)
    assert (tmp_path / "rank-5.finished").read_text() == '{"restart": 2}'
    assert read_finished(tmp_path, 5) == 2
    (tmp_path / "rank-6.finished").write_text("[]")
    with pytest.raises(ValueError):
        read_finished(tmp_path, 6)
    with pytest.raises(OSError):
        read_finished(tmp_path, 7)
