"""The RQ entry point: a real worker takes the job off its queue (burst mode) and supervises it
itself; its cold shutdown stops the running job's processes before it exits, and its death
takes them with it."""

import logging
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from rq import Queue
from rq.job import Job as RQJob
from rq.job import JobStatus

from service.db import session_scope
from service.executors.rq import enqueue_attempt, rq_job_id
from service.models import Job
from service.worker_records import read_worker_records, worker_key
from tests.integration.worker.conftest import WorkerEnv
from tests.support.procs import job_processes, start, stop, wait_until
from worker import process_tree, tasks
from worker.rq_worker import run_worker


def enqueue(env: WorkerEnv, job_id: str) -> None:
    with session_scope(env.engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        enqueue_attempt(env.redis, job, grace_s=env.settings.cancel_grace_s)


def test_burst_worker_runs_a_queued_job(wenv: WorkerEnv) -> None:
    queue = f"test-{uuid.uuid4().hex[:8]}"
    job_id = wenv.submit("flaky.py", queue=queue, max_restarts=1)
    enqueue(wenv, job_id)
    name = f"test-worker-{uuid.uuid4().hex[:8]}"

    assert run_worker([queue], burst=True, settings=wenv.settings, name=name)

    job = wenv.job(job_id)
    assert (job.state, job.exit_reason, job.worker) == ("succeeded", "completed", name)
    assert any(line.line.startswith("rank 0 restart") for line in wenv.logs(job_id))
    rq_queue = Queue(queue, connection=wenv.redis)
    assert rq_queue.count == 0
    # RQ's bookkeeping of the task, from its start to its end.
    rq_job = RQJob.fetch(rq_job_id(job_id, 1), connection=wenv.redis)
    assert (rq_job.get_status(), rq_job.worker_name) == (JobStatus.FINISHED, name)
    assert rq_queue.started_job_registry.get_job_ids() == []


def what_the_worker_holds(pid: int) -> dict[str, Any]:
    """What an idle worker holds that an attempt could leave behind in it. Sockets are counted
    apart: its Redis client's pool keeps a connection for each of its threads that talked at
    once (the task's and its heartbeat's), so it may hold one or two more after a later job."""
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    opened = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    return {
        "files": sorted(name for name in opened if not name.startswith("socket:")),
        "sockets": sum(name.startswith("socket:") for name in opened),
        "threads": len(tids),
        "policies": {os.sched_getscheduler(tid) for tid in tids},
        "cwd": os.readlink(f"/proc/{pid}/cwd"),
        "children": len(psutil.Process(pid).children()),
    }


def test_a_worker_is_left_as_it_was_by_the_attempts_it_supervised(
    wenv: WorkerEnv, tmp_path: Path
) -> None:
    """The worker runs its attempts itself (no work horse): after each, it holds no more files
    or threads than after the first, its threads are back to the normal CPU policy (a job's
    launcher inherits it), and nothing the attempts started is its child."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    settings = wenv.settings
    env = {
        **os.environ,
        "LAUNCHBAY_DATA_DIR": str(settings.data_dir),
        "LAUNCHBAY_DATABASE_URL": str(settings.database_url),
        "LAUNCHBAY_REDIS_URL": settings.redis_url,
    }
    code = f"from worker.rq_worker import run_worker; run_worker([{queue!r}])"
    proc = start([sys.executable, "-c", code], env, tmp_path / "worker.log")

    def run(script: str, **spec: Any) -> dict[str, Any]:
        job_id = wenv.submit(script, queue=queue, nproc_per_node=1, **spec)
        enqueue(wenv, job_id)
        assert wait_until(lambda: wenv.job(job_id).state in ("succeeded", "failed"), 60)
        assert wenv.job(job_id).exit_reason == "completed", (tmp_path / "worker.log").read_text()
        idle = lambda: any(  # noqa: E731
            r["pid"] == proc.pid and r["state"] == "idle" for r in read_worker_records(wenv.redis)
        )
        assert wait_until(idle, 10)
        return what_the_worker_holds(proc.pid)

    try:
        first = run("checkpoints.py")
        assert first["policies"] == {os.SCHED_OTHER}
        after = [run("checkpoints.py"), run("flaky.py", max_restarts=1), run("checkpoints.py")]
    finally:
        stop(proc)
    # A connection left per job would make three more after three jobs.
    sockets = first.pop("sockets")
    for held in after:
        assert sockets <= held.pop("sockets") <= sockets + 2
    assert after == [first] * 3


def test_cold_shutdown_stops_the_job_first(wenv: WorkerEnv, tmp_path: Path) -> None:
    queue = f"test-{uuid.uuid4().hex[:8]}"
    job_id = wenv.submit("sleeper.py", queue=queue, args=["--ignore-sigterm-rank", "1"])
    enqueue(wenv, job_id)
    settings = wenv.settings
    env = {
        **os.environ,
        "LAUNCHBAY_DATA_DIR": str(settings.data_dir),
        "LAUNCHBAY_DATABASE_URL": str(settings.database_url),
        "LAUNCHBAY_REDIS_URL": settings.redis_url,
        "LAUNCHBAY_CANCEL_GRACE_S": str(settings.cancel_grace_s),
        "LAUNCHBAY_WORKER_POLL_S": str(settings.worker_poll_s),
    }
    code = f"from worker.rq_worker import run_worker; run_worker([{queue!r}])"
    proc = start([sys.executable, "-c", code], env, tmp_path / "worker.log")
    try:
        assert wait_until(lambda: len(job_processes(job_id)) >= 3, timeout=60)
        assert wait_until(lambda: wenv.job(job_id).state == "running", timeout=10)
        # RQ's record of the running task.
        rq_job = RQJob.fetch(rq_job_id(job_id, 1), connection=wenv.redis)
        assert rq_job.get_status() == JobStatus.STARTED
        assert rq_job.worker_name == wenv.job(job_id).worker
        rq_queue = Queue(queue, connection=wenv.redis)
        assert rq_queue.started_job_registry.get_job_ids() == [rq_job.id]
        assert wenv.redis.llen(rq_queue.intermediate_queue_key) == 0
        os.kill(proc.pid, signal.SIGTERM)  # warm: would wait for the job...
        # (once the worker has taken the first: two pending SIGTERMs are delivered as one)
        log_file = tmp_path / "worker.log"
        assert wait_until(lambda: "warm shut down requested" in log_file.read_text(), 10, 0.01)
        os.kill(proc.pid, signal.SIGTERM)  # ...cold at once, not after a second: stop it now
        assert wait_until(lambda: proc.poll() is not None, timeout=settings.cancel_grace_s + 20)
    finally:
        stop(proc)
    job = wenv.job(job_id)
    log = (tmp_path / "worker.log").read_text()
    assert (job.state, job.exit_reason) == ("failed", "worker_lost"), log
    assert job.message is not None and "shut down while the job ran" in job.message
    assert not job_processes(job_id)


def test_a_sigkilled_worker_s_job_is_stopped_and_recorded_lost_by_its_watchdog(
    wenv: WorkerEnv, tmp_path: Path
) -> None:
    """No process of the worker's supervises the job any more: the kernel stops the job's
    processes (`worker.lifeline`), and the watchdog the worker forked as it started records the
    attempt as lost at once (not when the reaper finds its heartbeat stale), then exits."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    job_id = wenv.submit("sleeper.py", queue=queue, max_retries=1, args=["--events-every", "0.2"])
    enqueue(wenv, job_id)
    settings = wenv.settings
    env = {
        **os.environ,
        "LAUNCHBAY_DATA_DIR": str(settings.data_dir),
        "LAUNCHBAY_DATABASE_URL": str(settings.database_url),
        "LAUNCHBAY_REDIS_URL": settings.redis_url,
        "LAUNCHBAY_CANCEL_GRACE_S": str(settings.cancel_grace_s),
    }
    code = f"from worker.rq_worker import run_worker; run_worker([{queue!r}])"
    proc = start([sys.executable, "-c", code], env, tmp_path / "worker.log")
    try:
        assert wait_until(lambda: len(job_processes(job_id)) >= 3, timeout=60)
        assert wait_until(lambda: wenv.job(job_id).state == "running", timeout=10)
        name = wenv.job(job_id).worker
        assert name is not None and wenv.redis.exists(worker_key(name))
        [watchdog] = [
            child
            for child in psutil.Process(proc.pid).children()
            if os.getsid(child.pid) == child.pid  # its session's own (fork servers' too)
            and "warm_server.py" not in " ".join(child.cmdline())
        ]
        os.kill(proc.pid, signal.SIGKILL)  # the worker only
        retried = wait_until(lambda: wenv.job(job_id).attempt == 2, timeout=20)
    finally:
        stop(proc)
    log = (tmp_path / "worker.log").read_text()
    assert retried, log
    job = wenv.job(job_id)
    assert (job.state, job.attempt) == ("queued", 2), log
    assert job.message is not None and "ended with worker_lost" in job.message, job.message
    assert f"worker {name} died while the job ran" in job.message
    assert not wenv.redis.exists(worker_key(name))  # no retry is admitted onto it
    assert wait_until(lambda: not job_processes(job_id), timeout=10)
    assert wait_until(lambda: not watchdog.is_running(), timeout=10)


def test_an_attempt_taken_as_the_worker_shuts_down_cold_is_lost(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold shutdown that comes as the worker takes the attempt: the attempt is recorded as
    lost instead of being left `starting`; one that comes before leaves the job queued."""
    job_id = wenv.submit("sleeper.py", max_retries=0)
    taken = tasks.take_attempt

    def taken_then_shut_down(*args: Any, **kwargs: Any) -> Any:
        result = taken(*args, **kwargs)
        process_tree.request_shutdown()
        return result

    tasks.configure(wenv.settings)
    try:
        process_tree.request_shutdown()
        tasks.run_job(job_id, 1)
        assert (wenv.job(job_id).state, wenv.job(job_id).worker) == ("queued", None)
        process_tree._shutdown.clear()
        monkeypatch.setattr(tasks, "take_attempt", taken_then_shut_down)
        tasks.run_job(job_id, 1)
    finally:
        process_tree._shutdown.clear()
        tasks.configure(None)
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("failed", "worker_lost")
    assert job.message == f"worker {tasks.worker_name()} shut down before the job started"
    assert not job_processes(job_id)


def test_a_worker_given_gpus_without_cuda_refuses_unless_cpu_is_allowed(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """This machine has no CUDA: `--gpus 0` would quietly run every job on CPU."""
    from worker import devices
    from worker.devices import DevicesTaken, detect_cuda

    if detect_cuda().available:
        pytest.skip("this machine has CUDA")
    monkeypatch.setattr(devices, "_assigned", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(DevicesTaken, match="LAUNCHBAY_ALLOW_CPU_FALLBACK=true"):
        run_worker([queue], burst=True, settings=wenv.settings, gpus=("0",))

    allowed = wenv.settings.model_copy(update={"allow_cpu_fallback": True})
    with caplog.at_level(logging.WARNING, logger="worker.devices"):
        assert not run_worker([queue], burst=True, settings=allowed, gpus=("0",))
    assert "running jobs on CPU, as LAUNCHBAY_ALLOW_CPU_FALLBACK allows" in caplog.text


def test_workers_sharing_a_gpu_are_found_by_its_uuid_not_their_host_names(
    wenv: WorkerEnv,
) -> None:
    """Containers on bridge networks: each has a host name of its own, and each calls the GPU
    it was given `0`. Only the UUIDs in their records say whether they share one."""
    from worker.devices import DevicesTaken, WorkerDevices
    from worker.rq_worker import LaunchbayWorker

    queue = f"test-{uuid.uuid4().hex[:8]}"
    suffix = uuid.uuid4().hex[:8]
    started: list[LaunchbayWorker] = []

    def claim(name: str, host: str, gpu_uuid: str) -> None:
        worker = LaunchbayWorker([queue], connection=wenv.redis, name=f"{name}-{suffix}")
        worker.host, worker.gpu_uuids = host, (gpu_uuid,)
        started.append(worker)
        worker.claim_devices(WorkerDevices(gpus=("0",)))

    try:
        claim("a", "container-a", "uuid-of-gpu-4")
        claim("b", "container-b", "uuid-of-gpu-5")  # another GPU, also called 0: fine
        with pytest.raises(
            DevicesTaken, match=f"GPUs already owned on host container-c: 0 by worker a-{suffix}"
        ):
            claim("c", "container-c", "uuid-of-gpu-4")
    finally:
        for worker in started:
            wenv.redis.delete(worker_key(worker.name))
