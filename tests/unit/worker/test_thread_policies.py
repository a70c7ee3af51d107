"""The worker's own threads never pre-empt a rank yet cannot be starved: the checkpoint upload
(and what it starts) runs in SCHED_BATCH at nice 10, the heartbeat in SCHED_BATCH, and once the
ranks run every thread of the supervisor in SCHED_BATCH (docs/benchmarks.md, P1), until the
attempt is over. Nothing here is timed."""

import os
import sys
import threading
from pathlib import Path

import pytest

from service.artifacts import LocalStore
from worker.checkpoint_upload import CheckpointUploader
from worker.cpu_policy import back_to_normal, yield_cpu_to_ranks

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux scheduling policies")


def policy_of(tid: int) -> int:
    return os.sched_getscheduler(tid)


def test_the_upload_thread_and_what_it_starts_run_in_batches_niced(tmp_path: Path) -> None:
    file = tmp_path / "ckpt.bin"
    file.write_bytes(b"x" * 1000)
    seen: dict[str, int] = {}

    def unchanged() -> None:  # called in the upload thread after its try
        seen["thread"] = os.sched_getscheduler(0)
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
        child = threading.Thread(target=lambda: seen.update(child=os.sched_getscheduler(0)))
        child.start()
        child.join()

    # Tests of the monitor in this process may have put its threads in batches already; the
    # upload thread starts from the caller's policy, so start from the default one.
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    uploader = CheckpointUploader(LocalStore(tmp_path / "store"))
    try:
        stored = uploader.submit("k", file, unchanged).result(timeout=30)
    finally:
        uploader.close()
    assert stored.size == 1000
    assert seen == {"thread": os.SCHED_BATCH, "child": os.SCHED_BATCH, "nice": 10}
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's own is untouched
    assert os.getpriority(os.PRIO_PROCESS, 0) == nice


def test_yielding_puts_every_thread_in_batches_and_those_started_later() -> None:
    ready, done = threading.Event(), threading.Event()
    ids: dict[str, int] = {}
    result: dict[str, object] = {}

    def other() -> None:
        ids["other"] = threading.get_native_id()
        ready.set()
        done.wait(30)

    def supervisor() -> None:  # a thread of its own, so the test process's is left as it was
        ids["supervisor"] = threading.get_native_id()
        result["changed"] = yield_cpu_to_ranks()
        result["own"] = os.sched_getscheduler(0)
        child = threading.Thread(target=lambda: result.update(child=os.sched_getscheduler(0)))
        child.start()
        child.join()

    waiting = threading.Thread(target=other)
    waiting.start()
    ready.wait(30)
    try:
        worker = threading.Thread(target=supervisor)
        worker.start()
        worker.join(30)
        assert result["own"] == os.SCHED_BATCH
        assert result["child"] == os.SCHED_BATCH  # threads it starts later inherit it
        assert {ids["supervisor"], ids["other"]} <= set(result["changed"])  # type: ignore[arg-type]
        assert policy_of(ids["other"]) == os.SCHED_BATCH
        # The attempt over, the worker's threads (this one too) go back to normal, so that the
        # next job's launcher, which inherits its starter's policy, does not run in batches.
        assert set(back_to_normal()) >= {ids["other"], threading.get_native_id()}
        assert policy_of(ids["other"]) == os.SCHED_OTHER
        assert os.sched_getscheduler(0) == os.SCHED_OTHER
    finally:
        done.set()
        waiting.join(30)
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
