"""The scripts the worker runs by path, isolated (`python -I`: `rank_main.py`, the
`rank_group.py` and `rank_child.py` it loads, `lifeline.py`, and `jobs/capture`), import nothing
of Launchbay, so they keep their own copies of the contract's names and records: these tests
hold each copy equal to `jobs.contract` (the group record, to what the worker reads), so a
change on either side fails here."""

import ast
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from jobs.contract import env as contract_env
from jobs.contract import rank_files
from worker import lifeline, rank_group, rank_main, warm_launcher, warm_pool, warm_server
from worker.outcome_warnings import read_group_records

ROOT = Path(__file__).resolve().parents[3]
STANDALONE = [
    ROOT / "worker" / "rank_main.py",
    ROOT / "worker" / "rank_group.py",
    ROOT / "worker" / "rank_child.py",
    ROOT / "worker" / "lifeline.py",
    ROOT / "worker" / "scratch.py",
    ROOT / "worker" / "warm_server.py",
    ROOT / "worker" / "warm_launcher.py",
    ROOT / "worker" / "rank_exit.py",
    ROOT / "worker" / "process_block.py",
    *sorted((ROOT / "jobs" / "capture").glob("*.py")),
]


def test_the_rank_file_names_are_the_contracts() -> None:
    assert rank_main.RANK_LOG.format(7) == rank_files.LOG.name(7)
    assert rank_main.RANK_ERROR.format(7) == rank_files.ERROR.name(7)
    assert rank_main.RANK_FINISHED.format(7) == rank_files.FINISHED.name(7)
    assert rank_group.RECORD.format(7) == rank_files.GROUP.name(7)
    assert rank_group.record_path(Path("/l"), 7) == rank_files.GROUP.path(Path("/l"), 7)


def test_the_environment_names_are_the_contracts() -> None:
    assert rank_main.LAUNCHER_PID_ENV == contract_env.LAUNCHER_PID
    assert rank_main.CAPTURE_ENV == contract_env.CAPTURE
    assert lifeline.LAUNCHER_PID_ENV == contract_env.LAUNCHER_PID
    assert lifeline.CGROUP_ENV == contract_env.CGROUP
    assert lifeline.CPU_AFFINITY_ENV == contract_env.CPU_AFFINITY
    assert warm_launcher.LAUNCHER_PID_ENV == contract_env.LAUNCHER_PID
    assert warm_server.NO_TORCH_EXIT == warm_pool.NO_TORCH_EXIT


def string_constants(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is str}


@pytest.mark.parametrize("path", STANDALONE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_launchbay_variable_a_script_names_is_in_the_contract(path: Path) -> None:
    names = {v for k, v in vars(contract_env).items() if k.isupper() and isinstance(v, str)}
    spelled = {
        name
        for text in string_constants(path)
        for name in re.findall(r"\bLAUNCHBAY_[A-Z0-9_]+\b", text)
    }
    assert spelled - names == set()


def test_the_error_record_rank_main_writes_is_the_contracts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    rank_main.record_error(tmp_path, "3", "ValueError: bad", "Traceback ...", 1)
    [written] = tmp_path.iterdir()
    assert written.name == rank_files.ERROR.name(3)
    text = written.read_text()
    record = rank_files.ErrorRecord.from_json(text)
    assert (record.rank, record.local_rank, record.restart, record.exit_code) == (3, 1, 2, 1)
    assert (record.error, record.traceback) == ("ValueError: bad", "Traceback ...")
    # The same fields in the same order as the contract's writer: nothing more, nothing less.
    assert list(json.loads(text)) == list(json.loads(record.to_json()))
    assert rank_files.read_error_records(tmp_path, 2) == {3: record}


def test_the_finished_record_rank_main_writes_is_the_contracts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "4")
    rank_main.finish(tmp_path, "5")
    assert rank_files.FINISHED.path(tmp_path, 5).read_text() == rank_files.finished_text(4)
    assert rank_files.read_finished(tmp_path, 5) == 4


def test_the_group_record_rank_group_writes_is_what_the_worker_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c10d = SimpleNamespace(
        is_initialized=lambda: True,
        get_rank=lambda: 1,
        get_world_size=lambda: 2,
        get_backend=lambda: "gloo",
    )  # no group map: its collectives count 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "3")
    monkeypatch.setattr(rank_group._watch, "log_dir", tmp_path)
    monkeypatch.setattr(rank_group._watch, "file_rank", None)
    monkeypatch.setattr(rank_group._watch, "redirect", None)
    monkeypatch.setattr(rank_group._watch, "done", 5)
    rank_group.write_record(c10d)  # type: ignore[arg-type]
    assert [p.name for p in tmp_path.iterdir()] == [rank_files.GROUP.name(1)]
    [(rank, record)] = read_group_records(tmp_path, 3).items()
    assert (rank, record.rank, record.world_size, record.collectives) == (1, 1, 2, 5)
