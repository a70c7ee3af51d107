"""P9c: the training step stall while the worker uploads checkpoints (see bench.p9_store).

A rank (a torch process doing fixed CPU steps) pinned to one core, the worker's upload
thread and the S3 server on the other, as a GPU host's ranks and its worker do not share
cores. The ways' windows cycle in one rank's run (idle, P9c, idle, P9c′, ...), and each busy
window's mean step time is divided by the mean of the idle windows either side of it.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import Result, median
from devstack.s3server import S3Server
from service.settings import Settings

RANK_SOURCE = """\
import json, os, sys, time
import torch
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))
stop, steps = sys.argv[1], []
while len(steps) % 50 or not os.path.exists(stop):
    began = time.monotonic()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    steps.append([began, time.monotonic() - began])
    if len(steps) == 100:
        open(sys.argv[2] + ".ready", "w").close()
with open(sys.argv[2], "w") as out:
    json.dump(steps, out)
"""


def _pin(pid: int, cpus: set[int]) -> None:
    """Every thread of the process (an affinity set on a pid binds only that thread)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except OSError:
            pass


def _idle(pid: int) -> None:
    """Every thread of the process in SCHED_IDLE, nice 19 (and the threads it starts later)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setscheduler(int(task.name), os.SCHED_IDLE, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, int(task.name), 19)
        except OSError:
            pass


STALL_WAYS = {
    "P9c": "to the S3 server on this machine (in SCHED_IDLE, a stand-in for a remote store)",
    "P9c′": "the worker's part alone: read, hash, write to a local sink (no store server here)",
    "P9c-full": "the worker's part alone, with no bound on its reads",
    "P9c-none": "no upload at all (the control: what the windows alone give)",
}


def stall_ratios(
    windows: list[tuple[str, float, float]], steps: list[tuple[float, float]]
) -> dict[str, list[float]]:
    """For each busy window (every other one, "idle" ones either side), the mean time of the
    steps that began in it ÷ the mean of the two idle windows' means, by way."""

    def mean_step(a: float, b: float) -> float:
        window = [dt for t, dt in steps if a <= t < b]
        return sum(window) / len(window)

    ratios: dict[str, list[float]] = {}
    for i in range(1, len(windows) - 1, 2):
        way, a, b = windows[i]
        either_side = (mean_step(*windows[i - 1][1:]) + mean_step(*windows[i + 1][1:])) / 2
        ratios.setdefault(way, []).append(mean_step(a, b) / either_side)
    return ratios


# long: one experiment: pin the rank and the worker to their cores, cycle idle and busy
# windows of each way, compare the step times of each
def step_stalls(
    s3: S3Server, file: Path, workdir: Path, *, cycles: int = 30, window_s: float = 1.0
) -> list[Result]:
    """For each way of STALL_WAYS, the rank's mean step time in a window while the worker
    uploads `file` over and over ÷ the mean of the idle windows either side. One rank, the
    ways' windows cycling (idle, P9c, idle, P9c′, idle, ...), so that each way sees the same
    machine; the median over `cycles`."""
    from service.artifacts.s3 import S3Store
    from worker.checkpoint_upload import CheckpointUploader, Pace

    cpus = sorted(os.sched_getaffinity(0))
    rank_cpus, worker_cpus = ({cpus[0]}, set(cpus[1:])) if len(cpus) > 1 else (set(cpus), set(cpus))
    paced = Settings().checkpoint_upload_bytes_per_s
    s3_store = S3Store.from_url(s3.store_url("stall"), endpoint_url=s3.endpoint())
    sink = _SinkStore(workdir / "sink")
    uploaders = {
        "P9c": CheckpointUploader(s3_store, pace=Pace(paced)),
        "P9c′": CheckpointUploader(sink, pace=Pace(paced)),  # type: ignore[arg-type]
        "P9c-full": CheckpointUploader(sink),  # type: ignore[arg-type]
    }
    (workdir / "rank.py").write_text(RANK_SOURCE)
    assert s3.proc is not None
    _pin(s3.proc.pid, worker_cpus)
    # The store is another machine in production: here its CPU must not count as the upload's.
    _idle(s3.proc.pid)
    _pin(os.getpid(), worker_cpus)  # this process plays the worker
    stop, record = workdir / "rank.stop", workdir / "rank.json"
    ready = Path(f"{record}.ready")
    for old in (stop, record, ready):
        old.unlink(missing_ok=True)
    # The rank keeps its step times in memory and writes them once, at the end: no pipe or
    # file is written while it is measured.
    rank = subprocess.Popen([sys.executable, str(workdir / "rank.py"), str(stop), str(record)])
    _pin(rank.pid, rank_cpus)
    windows: list[tuple[str, float, float]] = []  # (way or "idle", start, end)
    uploaded = {way: 0 for way in uploaders}
    try:
        while not ready.exists():  # the rank's warm-up (imports, first 100 steps)
            if rank.poll() is not None:
                raise RuntimeError("the benchmark's rank ended before its first steps")
            time.sleep(0.05)
        for _ in range(cycles):
            for way in STALL_WAYS:
                began = time.monotonic()
                time.sleep(window_s)
                windows.append(("idle", began, time.monotonic()))
                began = time.monotonic()
                while way in uploaders and time.monotonic() - began < window_s:
                    key = f"stall/{uploaded[way]}"
                    uploaders[way].submit(key, file, lambda: None).result()
                    uploaded[way] += 1
                if way not in uploaders:
                    time.sleep(window_s)
                windows.append((way, began, time.monotonic()))
        began = time.monotonic()
        time.sleep(window_s)
        windows.append(("idle", began, time.monotonic()))
        stop.touch()
        rank.wait(timeout=60)
    finally:
        for uploader in uploaders.values():
            uploader.close()
        if rank.poll() is None:
            rank.kill()
        _pin(os.getpid(), set(cpus))
    ratios = stall_ratios(windows, json.loads(record.read_text()))
    busy_s = {way: sum(b - a for w, a, b in windows if w == way) for way in STALL_WAYS}
    results = []
    for way, where in STALL_WAYS.items():
        ratio, values = median(ratios[way]), ratios[way]
        goal = way in ("P9c", "P9c′")
        notes = "no upload"
        if way in uploaders:
            bound = f"at most {paced / 2**20:.0f} MiB/s" if way != "P9c-full" else "no bound"
            speed = uploaded[way] * file.stat().st_size / busy_s[way] / 1e6
            notes = f"upload {bound}, {speed:.0f} MB/s while busy"
        results.append(
            Result(
                way,
                f"training step time while the worker uploads ÷ while it does not; {where}",
                f"{ratio:.3f} (median of {len(values)} windows, "
                f"range {min(values):.3f}–{max(values):.3f})",
                "≤ 1.02" if goal else "report",
                ratio <= 1.02 if goal else None,
                f"{notes}; rank on CPU {sorted(rank_cpus)}, worker on {sorted(worker_cpus)}; "
                f"windows of ≥ {window_s:.0f} s, each ÷ the idle ones either side, the ways "
                "cycling",
            )
        )
    return results


class _SinkStore:
    """A store whose put writes the stream to one local file (what sending costs the worker,
    without a store server on the machine); remote, so the uploader streams to it."""

    name, remote = "sink", True

    def __init__(self, path: Path) -> None:
        from service.artifacts import LocalStore

        self.local = LocalStore(path)

    def put(self, key: str, chunks: Any, content_type: str | None = None) -> Any:
        return self.local.put("sink", chunks)
