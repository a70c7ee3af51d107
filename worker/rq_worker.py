"""The worker process: an RQ worker that supervises each Launchbay attempt itself.

No work horse is forked per task (RQ's `SimpleWorker`): a Launchbay task runs no user code in
the supervisor, which starts the job's processes as other users in sessions and cgroups of
their own, so a horse would isolate nothing, and forking one per job cost more CPU than
anything else a worker did for a short job (the fork, the copy-on-write faults it left in both
processes, a database engine with a cold statement cache: docs/benchmarks.md). Between
tasks the worker puts back what an attempt changed of it (its threads' CPU policy,
`worker.cpu_policy`) and stops what a supervisor that died left running (`worker.orphans`).

While a task runs, a thread of the worker keeps its heartbeats: RQ's (the worker's, the task's)
and the worker's record in Redis (`service.worker_records`, a short TTL) for GET /v1/workers:
its host (`LAUNCHBAY_WORKER_HOST`), queues, devices (`worker.devices`), current job and last
heartbeat, refreshed every `heartbeat_interval_s` (RQ's dequeue timeout is that interval while
idle). Redis going away and coming back is survived: a heartbeat or a bookkeeping write that
fails is logged, and a work loop that RQ gives up is started again. Before its first job a
worker writes its record and looks at the others': a GPU already owned by a live worker (the
same UUID, or the same id on the same host) makes it refuse to start (`DevicesTaken`), as does
a worker that should have GPUs but finds CUDA unusable (`worker.devices.check_cuda_usable`).

On SIGTERM (or SIGINT) the worker shuts down warm: it waits for the running job. A second
one, however soon after the first (RQ ignores one within a second, for its worker pools; a
Launchbay worker runs alone), is a cold shutdown: the running attempt stops its processes, is
recorded as `worker_lost` (retried while `max_retries` allow), and the worker exits. A worker
that dies without a word (SIGKILL, the OOM killer) takes its job's processes with it: the
kernel tells torchrun (`worker.lifeline`), and a warm launcher sees its supervisor's socket
close; its watchdog (`worker.watchdog`) records the attempt as lost at once.
"""

import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import partial
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError
from rq import Queue, SimpleWorker
from rq.executions import Execution
from rq.job import Job as RQJob
from rq.worker import WorkerStatus

from service.executors.dispatch import wake_dispatcher
from service.executors.rq import RUN_JOB_TASK, attempt_of_call
from service.hardening import harden_service
from service.models import utcnow
from service.scheduling.capacity import dispatch_queue_name, is_dispatch_queue
from service.schemas import WorkerJob, WorkerRecord
from service.settings import Settings, get_settings, removed_variables_note
from service.worker_records import delete_worker_record, read_worker_records, save_worker
from worker import tasks
from worker.cpu_policy import back_to_normal
from worker.devices import (
    CudaInfo,
    DevicesTaken,
    WorkerDevices,
    assign_devices,
    check_cuda_usable,
    check_gpus_seen,
    choose_devices,
    describe_conflicts,
    detect_cuda,
    find_gpu_conflicts,
)
from worker.orphans import stop_orphans
from worker.process_tree import request_shutdown, shutdown_requested
from worker.reach import check_host
from worker.warm_start import warm_servers
from worker.watchdog import watchdog

log = logging.getLogger(__name__)
# How long a work loop RQ gave up (Redis away) waits before it starts again.
RESTART_DELAY_S = 2.0
# How long after a task starts the worker's record first says so (`heartbeats`).
RECORD_BUSY_AFTER_S = 0.05


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def current_job(args: Sequence[Any]) -> WorkerJob | None:
    """What GET /v1/workers shows of a task `run_job(id, attempt[, node])` being run."""
    ref = attempt_of_call(args)
    if ref is None:
        return None
    return WorkerJob(id=ref.job_id, attempt=ref.attempt, node=ref.node)


class LaunchbayWorker(SimpleWorker):
    """RQ's worker running each task in its own process, with heartbeats kept while it runs,
    a cold shutdown that lets the job stop its processes first, and a record of itself for
    GET /v1/workers."""

    heartbeat_interval_s: float = 5.0
    host: str = socket.gethostname()
    devices: Sequence[str] = ("cpu:0",)
    # The UUIDs of its GPUs as CUDA reports them (none without CUDA), for the overlap check.
    gpu_uuids: Sequence[str] = ()
    # The device pool it shares with the other workers of its host in it (docs/scheduling.md).
    pool: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.main_pid = os.getpid()
        self.started = utcnow()
        # The job of the running task: {"id", "attempt"} and, for a multi-node job, "node".
        self.current: WorkerJob | None = None
        self.in_task = False
        self.stopping = False

    def request_stop(self, signum: Any, frame: Any) -> None:
        """The warm shutdown. During a task, only noted: the handler interrupts the
        supervisor, which may be in the middle of a Redis or database call itself."""
        self.stopping = True
        if not self.in_task:
            super().request_stop(signum, frame)  # idle: RQ stops its loop at once
            return
        signal.signal(signal.SIGINT, self.request_force_stop)
        signal.signal(signal.SIGTERM, self.request_force_stop)
        self._stop_requested = True
        log.info("worker %s: warm shut down requested: stopping after its job", self.name)

    def request_force_stop(self, signum: int, frame: Any) -> None:
        """The cold shutdown: RQ's, without its one-second grace for a repeated signal; a
        running attempt first stops its processes and is recorded as lost."""
        log.warning("worker %s: cold shut down", self.name)
        if not self.in_task:
            raise SystemExit()
        self._stop_requested = True
        request_shutdown()

    def execute_job(self, job: RQJob, queue: Queue) -> None:
        self.in_task = True
        self.current = current_job(job.args) if job.func_name == RUN_JOB_TASK else None
        try:
            execution = self.prepare_execution(job)
            with self.heartbeats(job, execution):
                self.perform_job(job, queue, execution)
            self.set_state(WorkerStatus.IDLE)
        except RedisError as exc:
            # RQ's bookkeeping of the job; the job's own outcome is in the database.
            log.warning("worker %s: Redis failed around job %s: %s", self.name, job.id, exc)
        finally:
            self.in_task = False
            self.current = None
            if not shutdown_requested():  # cold: its record is gone (`tasks.forget_worker`)
                self.save_record()
            self.wake_dispatcher()
            self.after_task()

    @contextmanager
    def heartbeats(self, job: RQJob, execution: Execution) -> Iterator[None]:
        """RQ's heartbeats and the worker's record, kept by a thread while `job` runs here: its
        current job once the attempt has had `RECORD_BUSY_AFTER_S` to start (written at once,
        it took ~1 ms of the CPU the attempt's take and launch need)."""
        done = threading.Event()

        def beat() -> None:
            if done.wait(RECORD_BUSY_AFTER_S):
                return  # over already: `execute_job` saves the record after it
            self.save_record()
            while not done.wait(self.heartbeat_interval_s):
                if shutdown_requested():
                    return  # shutting down cold: its record is gone (`tasks.forget_worker`)
                try:
                    self.maintain_heartbeats(job, execution)
                    self.save_record()
                except Exception:  # a heartbeat must not end: the record would expire
                    log.exception("worker %s: heartbeat failed", self.name)

        thread = threading.Thread(target=beat, name=f"heartbeat-{self.name}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def after_task(self) -> None:
        """Between tasks: put back the CPU policy an attempt gave the worker's threads, and
        stop what an attempt whose supervisor died (an earlier worker's) left running."""
        back_to_normal()
        stopped = stop_orphans(tasks.current_settings().data_dir.resolve())
        if stopped:
            log.warning("killed processes %s left by attempts whose supervisor died", stopped)

    def wake_dispatcher(self) -> None:
        """An attempt's task ended here: its devices may be free for the next job."""
        try:
            wake_dispatcher(self.connection)
        except RedisError as exc:
            log.warning("worker %s: cannot wake the dispatcher: %s", self.name, exc)

    def record(self) -> WorkerRecord:
        current = self.current
        dispatch_queue = dispatch_queue_name(self.name)
        return WorkerRecord(
            name=self.name,
            host=self.host,
            pid=self.main_pid,
            queues=[q for q in self.queue_names() if not is_dispatch_queue(q)],
            dispatch_queue=dispatch_queue if dispatch_queue in self.queue_names() else None,
            pool=self.pool,
            devices=list(self.devices),
            gpu_uuids=list(self.gpu_uuids),
            state="busy" if current else "idle",
            started_at=self.started,
            last_heartbeat=utcnow(),
            current_job=current,
        )

    def save_record(self) -> None:
        try:
            self.save_record_or_raise()
        except RedisError as exc:
            log.warning("worker %s: heartbeat failed: %s", self.name, exc)

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        if pipeline is None:
            with suppress(RedisError):  # the dequeue loop reconnects; the record says alive
                super().heartbeat(timeout)
        else:
            super().heartbeat(timeout, pipeline=pipeline)
        if not self.in_task:  # else the task's heartbeat thread writes it
            self.save_record()

    def maintain_heartbeats(self, job: RQJob, execution: Execution) -> None:
        try:
            super().maintain_heartbeats(job, execution)
        except RedisError as exc:
            log.warning("worker %s: heartbeat of job %s failed: %s", self.name, job.id, exc)
            self.save_record()

    def claim_devices(self, devices: WorkerDevices) -> None:
        """Announce our devices (our record) and refuse GPUs that another live worker of
        this host owns. Both of two workers starting at once on one GPU refuse: neither
        takes it. Waits for Redis while it does not answer."""
        self.devices = devices.ids()
        while True:
            try:
                self.save_record_or_raise()
                records = read_worker_records(self.connection)
                break
            except RedisError as exc:
                log.warning("worker %s: cannot claim its devices yet: %s", self.name, exc)
                time.sleep(RESTART_DELAY_S)
        if self.pool is not None:
            # The workers of one pool share its devices on purpose; the dispatcher divides them.
            records = [
                r
                for r in records
                if not (r.get("pool") == self.pool and r.get("host") == self.host)
            ]
        conflicts = find_gpu_conflicts(devices, self.host, records, self.name, self.gpu_uuids)
        if conflicts:
            with suppress(RedisError):
                delete_worker_record(self.connection, self.name)
            raise DevicesTaken(describe_conflicts(self.host, conflicts))

    def save_record_or_raise(self) -> None:
        ttl_s = max(15.0, 3 * self.heartbeat_interval_s)
        save_worker(self.connection, self.record(), ttl_s)

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            with suppress(RedisError):
                delete_worker_record(self.connection, self.name)


def preload() -> None:
    """Import what supervising a job needs before the first job, which then starts as quickly
    as the next. Not torch: the supervisor never needs it (the CUDA devices are asked about in
    a child process, `detect_cuda`; ranks import it in their fork servers)."""
    import sqlalchemy.dialects.postgresql  # noqa: F401
    import sqlalchemy.dialects.sqlite  # noqa: F401

    import jobs.recipes  # noqa: F401
    import worker.attempt  # noqa: F401
    from worker.prepare import torchrun_installed

    detect_cuda()
    torchrun_installed()


def run_worker(
    queues: Sequence[str] = ("default",),
    burst: bool = False,
    settings: Settings | None = None,
    *,
    name: str | None = None,
    logging_level: str = "INFO",
    gpus: Sequence[str] | None = None,
    cpu_slots: int | None = None,
    pool: str | None = None,
) -> bool:
    """Run a worker on `queues` until shut down (or, with `burst`, until they are empty),
    owning the CUDA devices `gpus` or `cpu_slots` CPU slots (default: `worker.devices`).

    Returns whether it ran any job (RQ's `Worker.work`). Raises `DevicesTaken` when it cannot
    have those devices.
    """
    settings = settings or get_settings()
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
    for note in removed_variables_note(os.environ):
        log.warning("%s", note)
    tasks.configure(settings)
    harden_service(settings.data_dir.resolve(), settings.resolved_database_url)
    check_host(settings)  # what jobs cannot reach refuses the start: `JobsCannotRun`
    devices = choose_devices(gpus, cpu_slots)  # before CUDA is first asked about
    preload()
    cuda = detect_cuda()
    check_cuda_usable(
        cuda,
        gpus_given=bool(gpus),
        slots_given=cpu_slots is not None,
        allow_cpu_fallback=settings.allow_cpu_fallback,
    )
    check_gpus_seen(devices, cuda)
    worker = make_worker(queues, settings, name or default_worker_name(), devices, cuda, pool)
    stopped = stop_orphans(settings.data_dir.resolve())
    if stopped:
        log.warning("killed processes %s left by attempts whose supervisor died", stopped)
    # Forked before any thread: when the worker dies, it records the attempt that was running.
    with watchdog(partial(tasks.lost_with_worker, worker.name, os.getpid())) as dog:
        tasks.context.watchdog = dog
        with warm_servers(tasks.context.warm_pool(), settings, cuda.available):
            gc.freeze()  # what it holds by now is never garbage: no collection walks it
            return work_until_stopped(worker, burst=burst, logging_level=logging_level)


def make_worker(
    queues: Sequence[str],
    settings: Settings,
    name: str,
    devices: WorkerDevices,
    cuda: CudaInfo,
    pool: str | None = None,
) -> LaunchbayWorker:
    """The RQ worker, owning `devices` (claimed now: `DevicesTaken` when another has them),
    shared with the other workers of `pool` on its host."""
    interval = max(1, round(settings.heartbeat_interval_s))
    name = name or default_worker_name()
    worker = LaunchbayWorker(
        # Its own queue first: what the dispatcher admitted here (docs/scheduling.md).
        [dispatch_queue_name(name), *queues],
        connection=Redis.from_url(settings.redis_url),
        name=name,
        # RQ's dequeue waits worker_ttl - 15 s, then heartbeats: every `interval`.
        worker_ttl=interval + 15,
        job_monitoring_interval=interval,
    )
    worker.heartbeat_interval_s = settings.heartbeat_interval_s
    worker.host = settings.worker_host
    worker.pool = pool
    if devices.gpus and cuda.available:
        worker.gpu_uuids = cuda.uuids[: len(devices.gpus)]
    worker.claim_devices(devices)
    assign_devices(devices)
    log.info(
        "worker %s on %s owns %s%s",
        worker.name,
        worker.host,
        devices.describe(),
        f", UUIDs {','.join(worker.gpu_uuids)}" if worker.gpu_uuids else "",
    )
    return worker


def work_until_stopped(worker: LaunchbayWorker, *, burst: bool, logging_level: str) -> bool:
    """RQ's work loop, started again while Redis comes and goes, until the worker is shut down
    (with `burst`, until its queues are empty); whether it ran any job."""
    worked = False
    while True:
        try:
            worked = bool(worker.work(burst=burst, logging_level=logging_level)) or worked
        except RedisError as exc:
            log.error("worker %s: Redis failed: %s", worker.name, exc)
        if burst or worker.stopping:
            return worked
        # RQ gave its loop up (Redis away): start it again once the old registration is gone.
        log.warning("worker %s: starting the work loop again", worker.name)
        time.sleep(RESTART_DELAY_S)
        with suppress(RedisError):
            worker.connection.delete(worker.key)
