"""Which reported checkpoint files may be registered, and which registered ones are kept."""

import io
import os
import sys
import time
import zipfile
from concurrent.futures import wait
from pathlib import Path

import pytest

from jobs.spec import CheckpointPolicy
from jobs.states import AttemptRef
from service.models import Checkpoint
from worker.checkpoint_upload import Pace, Stored
from worker.checkpoints import (
    CheckpointRegistrar,
    CheckpointRejected,
    _Pending,
    check_complete,
    open_for_writing,
    resolve_checkpoint,
    select_retained,
)
from worker.events import CheckpointEvent


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
    # A best metric no checkpoint reports (mistyped, or not reported yet): which is the best is
    # not known, so none is deleted for not being it.
    unknown = CheckpointPolicy(keep_last=1, best_metric="accuracy")
    assert select_retained(rows, unknown) == {"c1", "c2", "c3", "c4", "c5"}
    some = [*rows, checkpoint(6, loss=9, accuracy=0.5), checkpoint(7, loss=8)]
    assert select_retained(some, unknown) == {"c6", "c7"}
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


def zip_bytes(data: bytes = b"y" * 5000) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", data)
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


class RecordingRegistrar(CheckpointRegistrar):
    """The registrar with its two database writes recorded instead of made."""

    def __init__(self, data_dir: Path, upload_bytes_per_s: int = 0) -> None:
        folder = data_dir / "checkpoints" / "j"
        folder.mkdir(parents=True)
        super().__init__(
            None,  # type: ignore[arg-type]  # never used: both writes are overridden
            AttemptRef("j", 1),
            data_dir=data_dir,
            checkpoint_dir=folder,
            policy=CheckpointPolicy(),
            upload_bytes_per_s=upload_bytes_per_s,
        )
        self.written: list[tuple[str, int | None, str]] = []

    def _register(self, pending: _Pending, stored: Stored) -> None:
        self.written.append((pending.path.name, pending.event.step, stored.sha256))

    def stored(self) -> None:
        """Wait for the uploads under way, then register what they stored (the next poll)."""
        wait([p.upload for p in self.pending.values() if p.upload is not None])
        self.poll()

    def _apply_retention(self) -> None:
        pass


def report(name: str, step: int) -> CheckpointEvent:
    return CheckpointEvent(path=name, step=step, epoch=0)


def test_a_reported_checkpoint_is_registered_on_its_line(tmp_path: Path) -> None:
    """Its line is written once the file is complete: it is stored at once, with no settle
    time, and registered as soon as it is stored."""
    registrar = RecordingRegistrar(tmp_path)
    (registrar.checkpoint_dir / "step-1.pt").write_bytes(zip_bytes())
    registrar.add(report("step-1.pt", 1))
    assert all(p.upload is not None for p in registrar.pending.values())
    registrar.stored()
    assert [(name, step) for name, step, _ in registrar.written] == [("step-1.pt", 1)]
    assert registrar.registered == 1 and not registrar.pending


def test_a_checkpoint_still_open_for_writing_waits_and_is_refused_if_it_changed(
    tmp_path: Path,
) -> None:
    registrar = RecordingRegistrar(tmp_path)
    growing, held = registrar.checkpoint_dir / "growing.pt", registrar.checkpoint_dir / "held.pt"
    growing.write_bytes(zip_bytes())
    held.write_bytes(zip_bytes())
    with open(growing, "ab") as writer, open(held, "ab"):
        assert open_for_writing(growing)
        registrar.add(report("growing.pt", 1))
        registrar.add(report("held.pt", 2))
        registrar.poll()
        assert registrar.written == [] and len(registrar.pending) == 2
        assert all(p.upload is None for p in registrar.pending.values())
        writer.write(b"more")
    assert not open_for_writing(growing)
    registrar.poll()  # both closed: held.pt is as reported, growing.pt is not
    registrar.stored()
    assert [name for name, _, _ in registrar.written] == ["held.pt"]
    assert registrar.rejected == 1 and not registrar.pending


def test_reads_are_paced_while_ranks_may_run_and_go_at_full_speed_after_the_final_poll(
    tmp_path: Path,
) -> None:
    """At 64 KiB/s a checkpoint of 8 MiB would take two minutes: while the ranks run it is
    still being read; the final poll (no rank left) lifts the bound and it is stored at once."""
    registrar = RecordingRegistrar(tmp_path, upload_bytes_per_s=64 * 1024)
    (registrar.checkpoint_dir / "big.pt").write_bytes(zip_bytes(os.urandom(8 << 20)))
    registrar.add(report("big.pt", 1))
    [pending] = registrar.pending.values()
    assert pending.upload is not None
    assert wait([pending.upload], timeout=1.0).not_done  # one chunk read, the next held back
    began = time.monotonic()
    registrar.poll(final=True)
    assert time.monotonic() - began < 60  # far below the two minutes the bound would take
    assert [name for name, _, _ in registrar.written] == ["big.pt"]


def test_a_pace_holds_reads_to_its_rate_until_lifted() -> None:
    pace = Pace(bytes_per_s=100_000)
    chunks = pace.chunks(bytes(10_000) for _ in range(10))
    began = time.monotonic()
    assert sum(len(next(chunks)) for _ in range(4)) == 40_000
    assert time.monotonic() - began >= 0.3  # three waits of 0.1 s after the first three
    pace.lift()
    assert sum(len(c) for c in chunks) == 60_000 and pace.lifted
    assert Pace(0).lifted and Pace(None).lifted  # no bound


def test_worker_modules_do_not_shadow_the_standard_library() -> None:
    # rank_main.py runs as a script: its own directory is first on sys.path until it resets it.
    names = {p.stem for p in (Path(__file__).parents[3] / "worker").glob("*.py")}
    assert not names & set(sys.stdlib_module_names)


@pytest.mark.parametrize("value", ["-1", "fast", "1.5e9x", ""])
def test_an_upload_rate_that_is_not_a_count_of_bytes_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from pydantic import ValidationError

    from service.settings import Settings

    monkeypatch.setenv("LAUNCHBAY_CHECKPOINT_UPLOAD_BYTES_PER_S", value)
    with pytest.raises(ValidationError, match="checkpoint_upload_bytes_per_s"):
        Settings()


def test_the_upload_rate_is_64_mib_a_second_and_0_turns_the_bound_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from service.settings import Settings

    assert Settings().checkpoint_upload_bytes_per_s == 64 * 1024 * 1024
    monkeypatch.setenv("LAUNCHBAY_CHECKPOINT_UPLOAD_BYTES_PER_S", "0")
    rate = Settings().checkpoint_upload_bytes_per_s
    assert RecordingRegistrar(tmp_path, upload_bytes_per_s=rate).uploader.pace.lifted
