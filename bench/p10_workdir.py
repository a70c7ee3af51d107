"""P10: the writable working directory and "registered means kept" (`python -m bench workdir`).

- P10a: an attempt's start with a 1 GiB upload: the working directory as made now (a writable
  copy, `worker.prepare.prepare_code`, given to the job user with its baseline taken) ÷ the
  read-only copy of before (main at 152484a: the job's one copy, its files made read-only, the
  attempt's `code` a link to it, its tree given to the job's group), alternating, page cache
  warm for both. P10a′ is a retry's start: now a fresh copy again, before only the link.
- P10b: registering a 1 GiB checkpoint (the file work: Launchbay's own copy made while hashing,
  published) ÷ `cp` of the same file, and ÷ hashing it in place (all a registration did
  before), alternating; and the disk the kept copy takes (a reflink where the filesystem has
  them, else a copy).
- P10c: a declared checkpoint saved → registered and downloadable (the supervisor's poll of its
  declared outputs and the registrar, at the worker's 0.1 s), for 64 MiB and 1 GiB files, with
  no bound on reads; goal 2 s plus hashing at 500 MB/s. P10c′: the same while the ranks run,
  under the default read bound (LAUNCHBAY_CHECKPOINT_UPLOAD_BYTES_PER_S, 64 MiB/s).

Runs as root (the job user is a real one, as a root worker leases it).
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench.common import Result, median
from jobs.spec import CheckpointPolicy
from jobs.states import AttemptRef
from service.artifacts.tree import CHUNK
from worker import outputs
from worker.checkpoint_keep import KeepPlace, publish_local, snapshot_file
from worker.checkpoint_upload import Stored
from worker.checkpoints import CheckpointRegistrar, _Pending
from worker.launch import RunPaths
from worker.outputs import DeclaredOutputs
from worker.prepare import prepare_code
from worker.workdir import record_baseline

GIB = 1 << 30
ROUNDS = 3
ROUNDS_START = 7
BOUND = 64 * 1024 * 1024  # the default LAUNCHBAY_CHECKPOINT_UPLOAD_BYTES_PER_S


def _write_random(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as out:
        for _ in range(size >> 20):
            out.write(block)


def make_upload(root: Path) -> Path:
    """1 GiB of uploaded code as a user's directory holds it: 15 weight files of 64 MiB, then
    1,000 small source files (64 KiB each, 62.5 MiB), under `<root>/code/<id>`."""
    upload = root / "code" / ("ab" * 32)
    (upload / "src").mkdir(parents=True)
    for i in range(15):
        _write_random(upload / f"weights-{i}.bin", 64 << 20)
    for i in range(1000):
        (upload / "src" / f"module_{i}.py").write_bytes(os.urandom(64 << 10))
    (upload / "train.py").write_text("print('train')\n")
    return upload


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for top, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), uid, gid)


def start_before(upload: Path, run: Path, gid: int, first: bool) -> None:
    """Main's way: the job's one read-only copy (made by the first attempt), a link to it, and
    its tree given to the job user's group (worker/prepare.py, worker/isolation.py before)."""
    shared = run.parent / "code"
    if first:
        shutil.copytree(upload, shared, symlinks=True)
        for top, _, files in os.walk(shared):
            for name in files:
                path = Path(top, name)
                mode = path.lstat().st_mode
                path.chmod(0o555 if mode & 0o100 else 0o444)
    run.mkdir(parents=True, exist_ok=True)
    (run / "code").symlink_to(shared, target_is_directory=True)
    for top, dirs, files in os.walk(shared):
        os.lchown(top, 0, gid)
        os.chmod(top, 0o750)
        for name in dirs + files:
            os.lchown(os.path.join(top, name), 0, gid)


def start_now(upload: Path, run: Path, uid: int, gid: int) -> None:
    """This branch's way: a fresh writable copy, the job user's, and its baseline."""
    prepare_code(upload.parent, upload.name, run / "work", "train.py")
    _chown_tree(run / "work", uid, gid)
    record_baseline(run / "work")


def _timed(action: Callable[[], object]) -> float:
    os.sync()  # what earlier rounds wrote is not this round's to flush
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def p10a(root: Path, uid: int, gid: int) -> list[Result]:
    upload = make_upload(root)
    first: dict[str, list[float]] = {"now": [], "before": []}
    retry: dict[str, list[float]] = {"now": [], "before": []}
    for round_ in range(ROUNDS_START):
        job = root / "runs" / f"job-{round_}"
        for way in ("before", "now") if round_ % 2 else ("now", "before"):
            run = job / way / "attempt-1"
            if way == "now":
                first[way].append(_timed(partial(start_now, upload, run, uid, gid)))
            else:
                first[way].append(_timed(partial(start_before, upload, run, gid, True)))
        for way in ("now", "before"):
            run = job / way / "attempt-2"
            if way == "now":
                retry[way].append(_timed(partial(start_now, upload, run, uid, gid)))
            else:
                retry[way].append(_timed(partial(start_before, upload, run, gid, False)))
        shutil.rmtree(job)
    ratios = sorted(n / b for n, b in zip(first["now"], first["before"], strict=True))
    now, before = median(first["now"]), median(first["before"])
    return [
        Result(
            "P10a",
            "attempt start with a 1 GiB upload: writable working directory ÷ the read-only copy",
            f"{median(ratios):.2f} (median of {ROUNDS_START} side-by-side pairs, range "
            f"{ratios[0]:.2f}–{ratios[-1]:.2f}; {now:.2f} s vs {before:.2f} s)",
            "≤ 1.1",
            median(ratios) <= 1.1,
            "15 × 64 MiB + 1,000 × 64 KiB files; copy, job user's ownership, baseline; "
            "ext4 here (no reflinks): a byte copy; pairs in alternating order, sync before each",
        ),
        Result(
            "P10a′",
            "a retry's start, the same: a fresh copy now ÷ a link to the job's copy before",
            f"{median(retry['now']):.2f} s vs {median(retry['before']):.3f} s",
            "report",
            None,
            "a retry starts from a fresh copy (reflinks would make it near free)",
        ),
    ]


class _Recorded(CheckpointRegistrar):
    """The worker's registrar, with its database writes left out (timed: the files' part)."""

    def __init__(self, data: Path, work: Path, bound: int = 0) -> None:
        super().__init__(
            None,  # type: ignore[arg-type]
            AttemptRef("j", 1),
            data_dir=data,
            checkpoint_dir=RunPaths.for_attempt(data, "j", 1).checkpoint_dir,
            policy=CheckpointPolicy(),
            upload_bytes_per_s=bound,
            work_dir=work,
        )
        self.done: dict[str, float] = {}

    def _register(self, pending: _Pending, stored: Stored) -> None:
        self.done[pending.key] = time.perf_counter()

    def _apply_retention(self) -> None:
        pass


def _data_dir(root: Path) -> tuple[Path, Path, Path]:
    data = root / f"data-{uuid.uuid4().hex[:8]}"
    paths = RunPaths.for_attempt(data, "j", 1)
    for directory in (paths.work_dir, paths.checkpoint_dir, paths.kept_dir):
        directory.mkdir(parents=True)
    return data, paths.work_dir, paths.kept_dir


def _keep_one(source: Path, kept: Path) -> None:
    st = source.stat()
    snapshot = snapshot_file(source, st.st_size, st.st_ino, KeepPlace(kept.parent, kept.parent))
    publish_local(snapshot, kept)


def _hash_in_place(source: Path) -> None:
    digest = hashlib.sha256()
    with open(source, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)


def p10b(root: Path) -> list[Result]:
    """The file work of a registration, in this thread (the registrar's runs at nice 10, so on
    a busy host its latency is the scheduler's): Launchbay's copy made while hashing, then
    renamed into place ÷ `cp`; and ÷ hashing in place, all a registration did before."""
    ways = ("keep", "cp", "hash")
    times: dict[str, list[float]] = {way: [] for way in ways}
    data, _, kept = _data_dir(root)
    source = RunPaths.for_attempt(data, "j", 1).checkpoint_dir / "model.pt"
    _write_random(source, GIB)
    blocks = 0
    for round_ in range(ROUNDS_START):
        for way in ways[round_ % 3 :] + ways[: round_ % 3]:
            if way == "cp":
                argv = ["cp", str(source), str(root / "cp.pt")]
                times[way].append(_timed(partial(subprocess.run, argv, check=True)))
                (root / "cp.pt").unlink()
            elif way == "hash":
                times[way].append(_timed(partial(_hash_in_place, source)))
            else:
                times[way].append(_timed(partial(_keep_one, source, kept / "model.pt")))
                blocks = (kept / "model.pt").stat().st_blocks * 512
                (kept / "model.pt").unlink()
    shutil.rmtree(data)
    keeping, copying, hashing = (median(times[way]) for way in ways)
    return [
        Result(
            "P10b",
            "registering a 1 GiB checkpoint (Launchbay's copy made while hashing) ÷ `cp` of it",
            f"{keeping / copying:.2f} ({keeping:.2f} s vs {copying:.2f} s); ÷ hashing in place "
            f"(before): {keeping / hashing:.2f} ({hashing:.2f} s); medians of {ROUNDS_START}",
            "report",
            None,
            f"disk: the kept copy takes {blocks / GIB:.2f} GiB beside the program's file "
            "(ext4: no reflinks; with them, ~0); a hard link is no copy (a save to the same "
            "name truncates both); neither way fsyncs",
        )
    ]


def _saved_to_registered(root: Path, size: int, bound: int) -> float:
    data, work, _ = _data_dir(root)
    registrar = _Recorded(data, work, bound)
    declared = DeclaredOutputs(work, ["checkpoints/epoch_*.pt"], registrar)
    (work / "checkpoints").mkdir()
    path = work / "checkpoints" / "epoch_3.pt"
    _write_random(path, size)  # closed: saved
    saved = time.perf_counter()
    deadline = saved + 120
    while not registrar.done and time.perf_counter() < deadline:
        declared.poll()
        registrar.poll()
        time.sleep(0.1)  # LAUNCHBAY_WORKER_POLL_S
    latency = registrar.done["checkpoints/j/work/checkpoints/epoch_3.pt"] - saved
    registrar.uploader.close()
    shutil.rmtree(data)
    return latency


def p10c(root: Path) -> list[Result]:
    results = []
    for size, label in ((64 << 20, "64 MiB"), (GIB, "1 GiB")):
        latency = median([_saved_to_registered(root, size, 0) for _ in range(ROUNDS)])
        allowed = 2.0 + size / 500e6
        results.append(
            Result(
                "P10c",
                f"declared checkpoint saved → registered and downloadable, {label}, reads unbound",
                f"{latency:.2f} s (median of {ROUNDS})",
                f"≤ {allowed:.2f} s (2 s + hashing at 500 MB/s)",
                latency <= allowed,
                f"settles after {outputs.QUIET_S:g} s unchanged, scans every {outputs.SCAN_S:g} s",
            )
        )
    bounded = median([_saved_to_registered(root, 64 << 20, BOUND) for _ in range(ROUNDS)])
    results.append(
        Result(
            "P10c′",
            "the same, 64 MiB, while the ranks run: reads at the default 64 MiB/s bound",
            f"{bounded:.2f} s (median of {ROUNDS})",
            "report",
            None,
            "the bound keeps a rank's steps within 2 % (P9c); lifted when the ranks are gone",
        )
    )
    return results


def run() -> list[Result]:
    from worker.isolation import ensure_job_user

    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-workdir-"))
    try:
        uid, gid = ensure_job_user("launchbay-job-0")
        return p10a(root, uid, gid) + p10b(root) + p10c(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
