"""What of a working directory is kept as artifacts (worker/workdir.py), and which declared
outputs are handed to the registrar, when (worker/outputs.py)."""

import os
import time
from pathlib import Path

import pytest

from jobs.outputs import OutputMatcher
from jobs.spec import JobSpec
from worker import outputs
from worker.outputs import DeclaredOutputs, find_matches, kept_as_artifacts
from worker.workdir import keep_written, make_work_dir, record_baseline, restore_checkpoint


def every(rel: str) -> bool:
    return True


def files_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_what_the_program_wrote_is_kept_and_nothing_else(tmp_path: Path) -> None:
    code, work, artifacts = tmp_path / "code", tmp_path / "work", tmp_path / "artifacts"
    (code / "pkg").mkdir(parents=True)
    (code / "train.py").write_text("print(1)\n")
    (code / "config.json").write_text("{}\n")
    (code / "pkg" / "util.py").write_text("X = 1\n")
    make_work_dir(work, code, None)
    baseline = record_baseline(work)

    (work / "config.json").write_text('{"changed": 1}\n')  # a file of the code, rewritten
    (work / "model.pt").write_bytes(b"m")
    (work / "logs").mkdir()
    (work / "logs" / "run.txt").write_text("ok\n")
    (work / "__pycache__").mkdir()
    (work / "__pycache__" / "util.cpython-311.pyc").write_bytes(b"pyc")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not the job's\n")
    (work / "secret-link.txt").symlink_to(outside / "secret.txt")
    (work / "outside-dir").symlink_to(outside)

    kept = keep_written(work, baseline, artifacts, wanted=every, job_uid=None, owner=None)

    assert files_under(artifacts) == ["config.json", "logs/run.txt", "model.pt"]
    assert (artifacts / "config.json").read_text() == '{"changed": 1}\n'
    assert kept.files == 3 and kept.refused == ["secret-link.txt: not a regular file"]
    assert (outside / "secret.txt").read_text() == "not the job's\n"
    assert not any(p.is_symlink() for p in artifacts.rglob("*"))


def test_a_link_planted_where_artifacts_go_is_replaced_never_followed(tmp_path: Path) -> None:
    """The job owned its artifacts directory while it ran: a link it left there, to a directory
    or a file elsewhere, must not carry what is kept (by a root worker) out of it."""
    work, artifacts, elsewhere = tmp_path / "work", tmp_path / "artifacts", tmp_path / "elsewhere"
    for directory in (work / "logs", artifacts, elsewhere):
        directory.mkdir(parents=True)
    (work / "logs" / "run.txt").write_text("ok\n")
    (work / "model.pt").write_bytes(b"m")
    (artifacts / "logs").symlink_to(elsewhere)
    (elsewhere / "victim").write_text("untouched\n")
    (artifacts / "model.pt").symlink_to(elsewhere / "victim")

    keep_written(work, {}, artifacts, wanted=every, job_uid=None, owner=None)

    assert list(elsewhere.iterdir()) == [elsewhere / "victim"]
    assert (elsewhere / "victim").read_text() == "untouched\n"
    assert not (artifacts / "logs").is_symlink() and (artifacts / "logs" / "run.txt").is_file()
    assert not (artifacts / "model.pt").is_symlink()


def test_only_the_job_users_own_files_are_kept(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("mine\n")
    kept = keep_written(
        work, {}, tmp_path / "artifacts", wanted=every, job_uid=os.getuid() + 1, owner=None
    )
    assert kept.files == 0 and kept.refused == ["mine.txt: not the job user's own file"]
    assert (work / "mine.txt").exists()


def test_a_resumed_checkpoint_is_a_copy_the_program_may_overwrite(tmp_path: Path) -> None:
    kept = tmp_path / "kept.pt"
    kept.write_bytes(b"registered")
    kept.chmod(0o440)
    target = restore_checkpoint(kept, tmp_path / "work" / "snapshot.pt")
    target.write_bytes(b"overwritten")  # as torch.save to the same name does
    assert kept.read_bytes() == b"registered"
    assert kept.stat().st_ino != target.stat().st_ino


def spec(**outputs_: object) -> JobSpec:
    return JobSpec(name="j", recipe="synthetic", outputs=outputs_ or None)


def test_which_written_files_are_artifacts() -> None:
    assert kept_as_artifacts(spec())("anything/at/all.bin")
    declared = kept_as_artifacts(spec(checkpoints=["snapshot.pt", "out/checkpoint-*"]))
    assert not declared("snapshot.pt")  # a checkpoint, not an artifact
    assert not declared("out/checkpoint-608/model.safetensors")  # inside a declared directory
    assert declared("out/log.txt")
    narrowed = kept_as_artifacts(spec(artifacts=["*.json", "lightning_logs"]))
    assert narrowed("metrics.json") and narrowed("lightning_logs/version_0/events.out")
    assert not narrowed("data/MNIST/raw/train-images")
    assert not kept_as_artifacts(spec(artifacts=[]))("metrics.json")


class Handed:
    def __init__(self) -> None:
        self.handed: list[tuple[str, int | None]] = []

    def add_declared(self, rel: str, step: int | None) -> None:
        self.handed.append((rel, step))


def test_a_declared_output_is_handed_over_once_settled_and_again_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outputs, "SCAN_S", 0.0)
    monkeypatch.setattr(outputs, "QUIET_S", 0.3)
    registrar = Handed()
    declared = DeclaredOutputs(tmp_path, ["snapshot.pt", "ckpt/epoch_*.pt"], registrar)  # type: ignore[arg-type]
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "snapshot.pt").write_bytes(b"v1")
    (tmp_path / "ckpt" / "epoch_3.pt").write_bytes(b"e3")
    (tmp_path / "other.pt").write_bytes(b"not declared")
    declared.poll()
    assert registrar.handed == []  # just seen: not settled yet
    with open(tmp_path / "ckpt" / "epoch_3.pt", "ab"):  # still open for writing
        time.sleep(0.35)
        declared.poll()
    assert registrar.handed == [("snapshot.pt", None)]
    declared.poll()
    assert registrar.handed == [("snapshot.pt", None), ("ckpt/epoch_3.pt", 3)]
    declared.poll()  # nothing new
    assert len(registrar.handed) == 2
    (tmp_path / "snapshot.pt").write_bytes(b"v2, saved again")
    declared.poll(final=True)  # the ranks are gone: at once
    assert registrar.handed[2:] == [("snapshot.pt", None)]


def test_a_link_never_matches_a_declared_output(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "model.pt").write_bytes(b"m")
    (tmp_path / "model.pt").symlink_to(tmp_path / "real" / "model.pt")
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    found = find_matches(tmp_path, OutputMatcher(["model.pt", "**/model.pt", "linked"]))
    assert found == [("real/model.pt", False)]
