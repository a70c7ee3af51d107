"""The worker's own threads give the CPU to the ranks: the checkpoint upload (and what it
starts) runs in SCHED_IDLE, the heartbeat in SCHED_BATCH, and once the ranks run every other
thread of the supervisor in SCHED_IDLE (docs/benchmarks.md, P1). Nothing here is timed."""

import os
import sys
import threading
from pathlib import Path

import pytest

from service.artifacts import LocalStore
from worker.checkpoint_upload import CheckpointUploader
from worker.supervise import run_in_batches, yield_cpu_to_ranks

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux scheduling policies")


def policy_of(tid: int) -> int:
    return os.sched_getscheduler(tid)


def test_the_upload_thread_and_what_it_starts_run_when_idle(tmp_path: Path) -> None:
    file = tmp_path / "ckpt.bin"
    file.write_bytes(b"x" * 1000)
    seen: dict[str, int] = {}

    def unchanged() -> None:  # called in the upload thread after its try
        seen["thread"] = os.sched_getscheduler(0)
        child = threading.Thread(target=lambda: seen.update(child=os.sched_getscheduler(0)))
        child.start()
        child.join()

    uploader = CheckpointUploader(LocalStore(tmp_path / "store"))
    try:
        stored = uploader.submit("k", file, unchanged).result(timeout=30)
    finally:
        uploader.close()
    assert stored.size == 1000
    assert seen == {"thread": os.SCHED_IDLE, "child": os.SCHED_IDLE}
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's own is untouched


def test_yielding_lowers_every_thread_but_the_kept_one() -> None:
    ready, done = threading.Event(), threading.Event()
    ids: dict[str, int] = {}
    result: dict[str, object] = {}

    def kept() -> None:
        run_in_batches()
        ids["kept"] = threading.get_native_id()
        ready.set()
        done.wait(30)

    def supervisor() -> None:  # a thread of its own: SCHED_IDLE cannot be undone unprivileged
        ids["supervisor"] = threading.get_native_id()
        result["lowered"] = yield_cpu_to_ranks(
            keep={ids["kept"], threading.main_thread().native_id}
        )
        result["own"] = os.sched_getscheduler(0)
        child = threading.Thread(target=lambda: result.update(child=os.sched_getscheduler(0)))
        child.start()
        child.join()

    heartbeat = threading.Thread(target=kept)
    heartbeat.start()
    ready.wait(30)
    try:
        worker = threading.Thread(target=supervisor)
        worker.start()
        worker.join(30)
        assert result["own"] == os.SCHED_IDLE
        assert result["child"] == os.SCHED_IDLE  # threads it starts later inherit it
        assert ids["supervisor"] in result["lowered"]  # type: ignore[operator]
        assert policy_of(ids["kept"]) == os.SCHED_BATCH
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
    finally:
        done.set()
        heartbeat.join(30)
