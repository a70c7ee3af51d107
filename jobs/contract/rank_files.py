"""The files each rank leaves in the attempt's log directory (``LAUNCHBAY_LOG_DIR``), which the
worker reads when the attempt ends:

    rank-<n>.log         the rank's stdout and stderr (`worker/rank_main.py`)
    rank-<n>.error.json  its uncaught exception, `ErrorRecord` (rank_main, and the SDK first)
    rank-<n>.finished    its program finished, ``{"restart": n}`` (rank_main, the SDK)
    rank-<n>.group       the process group it formed (`worker/rank_group.py`)

Their names (`LOG`, `ERROR`, `FINISHED`, `GROUP`: `RankFile.name` builds one, `rank_of` parses
it back), the error record and the finished record are written once here. The rank entry
(`worker/rank_main.py`, `rank_group.py`, `rank_child.py`) runs as a script that may import
nothing of Launchbay, so it keeps copies of its own; a unit test holds them equal to these.
"""

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PREFIX = "rank-"
# The most of an error record the worker reads: the file is the job's.
MAX_RECORD_BYTES = 1 << 20


@dataclass(frozen=True)
class RankFile:
    """One kind of per-rank file: ``rank-<n><suffix>``."""

    suffix: str

    def name(self, rank: int | str) -> str:
        return f"{PREFIX}{rank}{self.suffix}"

    def path(self, log_dir: Path, rank: int | str) -> Path:
        return log_dir / self.name(rank)

    def rank_of(self, name: str) -> int | None:
        """The rank a file of this kind is named for, None for any other name."""
        found = re.match(rf"^{PREFIX}(\d+){re.escape(self.suffix)}$", name)
        return None if found is None else int(found.group(1))

    def ranks_in(self, names: Iterable[str]) -> dict[int, str]:
        """{rank: name} of the files of this kind among `names`."""
        return {rank: name for name in names if (rank := self.rank_of(name)) is not None}

    @property
    def glob(self) -> str:
        """The pattern of every name of this kind (any text for the rank)."""
        return f"{PREFIX}*{self.suffix}"


LOG = RankFile(".log")
ERROR = RankFile(".error.json")
FINISHED = RankFile(".finished")
GROUP = RankFile(".group")


@dataclass(frozen=True)
class ErrorRecord:
    """A rank's uncaught exception: ``error`` is "Type: message", ``traceback`` as Python
    prints it, ``restart`` the elastic restart it failed in (``TORCHELASTIC_RESTART_COUNT``)."""

    rank: int
    exit_code: int
    error: str
    traceback: str
    ts: float
    local_rank: int = 0
    restart: int = 0
    pid: int = 0

    def to_json(self) -> str:
        return json.dumps(
            {
                "rank": self.rank,
                "local_rank": self.local_rank,
                "restart": self.restart,
                "pid": self.pid,
                "exit_code": self.exit_code,
                "error": self.error,
                "traceback": self.traceback,
                "ts": self.ts,
            }
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> "ErrorRecord":
        """The record a file holds; ValueError when it is not one (only `rank` is required)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("an error record is a JSON object")
        try:
            return cls(
                rank=int(data["rank"]),
                exit_code=int(data.get("exit_code", 1)),
                error=str(data.get("error", "")),
                traceback=str(data.get("traceback", "")),
                ts=float(data.get("ts", 0.0)),
                local_rank=int(data.get("local_rank", 0)),
                restart=int(data.get("restart", 0)),
                pid=int(data.get("pid", 0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an error record: {exc!r}") from None


def write_error_record(log_dir: Path, record: ErrorRecord, writer: str = "") -> Path:
    """Put `record` in place as the rank's ``rank-<n>.error.json`` (whole or not at all,
    through a temporary name of its `writer`'s own); OSError when it cannot."""
    target = ERROR.path(log_dir, record.rank)
    temp = target.with_name(f".{target.name}{f'.{writer}' if writer else ''}.tmp")
    temp.write_text(record.to_json())
    os.replace(temp, target)
    return target


def read_error_records(log_dir: Path, restart: int) -> dict[int, ErrorRecord]:
    """{rank: record} of the given elastic restart; unreadable records are left out."""
    records = {}
    for file in log_dir.glob(ERROR.glob):
        try:
            with open(os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as raw:
                record = ErrorRecord.from_json(raw.read(MAX_RECORD_BYTES))
        except (OSError, ValueError):
            continue
        if record.restart == restart:
            records[record.rank] = record
    return records


def finished_text(restart: int) -> str:
    """What ``rank-<n>.finished`` holds: the elastic restart the program finished in."""
    return json.dumps({"restart": restart})


def write_finished(log_dir: Path, rank: int | str, restart: int) -> None:
    """Say that rank `rank`'s program finished in elastic restart `restart`; OSError when it
    cannot."""
    FINISHED.path(log_dir, rank).write_text(finished_text(restart))


def read_finished(log_dir: Path, rank: int) -> int:
    """The elastic restart rank `rank` said it finished in; OSError or ValueError when it did
    not say so."""
    data = json.loads(FINISHED.path(log_dir, rank).read_text())
    if not isinstance(data, dict):
        raise ValueError("a finished record is a JSON object")
    try:
        return int(data.get("restart", 0))
    except TypeError as exc:
        raise ValueError(f"not a finished record: {exc!r}") from None
