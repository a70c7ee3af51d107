"""Which reported checkpoint files may be registered, and which registered ones are kept."""

import io
import os
import sys
import zipfile
from pathlib import Path

import pytest

from jobs.spec import CheckpointPolicy
from service.models import Checkpoint
from worker.checkpoints import (
    CheckpointRejected,
    check_complete,
    resolve_checkpoint,
    select_retained,
)


def checkpoint(seq: int, **metrics: float) -> Checkpoint:
    return Checkpoint(
        id=f"c{seq}", job_id="j", seq=seq, attempt=1, metrics=metrics, size=1, sha256="0", path=""
    )


def test_keep_last_and_best() -> None:
    rows = [checkpoint(i, loss=loss) for i, loss in enumerate([5, 1, 4, 3, 2], start=1)]
    assert select_retained(rows, CheckpointPolicy(keep_last=2)) == {"c4", "c5"}
    best_min = CheckpointPolicy(keep_last=2, best_metric="loss")
    assert select_retained(rows, best_min) == {"c2", "c4", "c5"}
    best_max = CheckpointPolicy(keep_last=1, best_metric="loss", best_mode="max")
    assert select_retained(rows, best_max) == {"c1", "c5"}
    unknown = CheckpointPolicy(keep_last=1, best_metric="accuracy")
    assert select_retained(rows, unknown) == {"c5"}
    ties = [checkpoint(1, loss=1), checkpoint(2, loss=1), checkpoint(3, loss=2)]
    assert select_retained(ties, CheckpointPolicy(keep_last=1, best_metric="loss")) == {"c2", "c3"}


def test_paths_must_stay_inside(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints" / "j"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.pt").write_bytes(b"x")
    (tmp_path / "outside.pt").write_bytes(b"x")
    os.symlink(tmp_path / "outside.pt", folder / "link.pt")
    os.symlink(folder / "sub" / "a.pt", folder / "inner.pt")

    assert resolve_checkpoint(folder, "sub/a.pt") == (folder / "sub" / "a.pt").resolve()
    assert resolve_checkpoint(folder, "inner.pt") == (folder / "sub" / "a.pt").resolve()
    # A directory is a checkpoint too (its files are checked when it settles).
    assert resolve_checkpoint(folder, "sub") == (folder / "sub").resolve()
    for bad in ("../outside.pt", str(tmp_path / "outside.pt"), "link.pt", "missing.pt", "."):
        with pytest.raises(CheckpointRejected):
            resolve_checkpoint(folder, bad)


def zip_bytes() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", b"y" * 5000)
    return buffer.getvalue()


def test_format_checks(tmp_path: Path) -> None:
    good = tmp_path / "good.pt"
    good.write_bytes(zip_bytes())
    check_complete(good, good.stat().st_size)
    cut = tmp_path / "cut.pt"
    cut.write_bytes(zip_bytes()[:3000])
    with pytest.raises(CheckpointRejected, match="not a complete zip"):
        check_complete(cut, cut.stat().st_size)
    other = tmp_path / "state.bin"
    other.write_bytes(b"anything")
    check_complete(other, 8)


def test_safetensors_length(tmp_path: Path) -> None:
    header = b'{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}'
    data = len(header).to_bytes(8, "little") + header + b"\0" * 8
    whole = tmp_path / "m.safetensors"
    whole.write_bytes(data)
    check_complete(whole, len(data))
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-3])
    with pytest.raises(CheckpointRejected):
        check_complete(cut, len(data) - 3)


def test_worker_modules_do_not_shadow_the_standard_library() -> None:
    # rank_main.py runs as a script: its own directory is first on sys.path until it resets it.
    names = {p.stem for p in (Path(__file__).parents[3] / "worker").glob("*.py")}
    assert not names & set(sys.stdlib_module_names)
