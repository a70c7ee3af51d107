"""The worker process: an RQ worker whose work horses run Launchbay jobs.

RQ forks a work horse per job. On SIGTERM the worker shuts down warm (it waits for the
running job); a second SIGTERM (or SIGINT) is a cold shutdown, where RQ would SIGKILL the
horse at once and orphan the job's processes, which live in sessions of their own. Here the
horse is first sent SIGTERM, which its supervisor takes as "stop the job's processes, record
the attempt as `worker_lost`, return"; only then is it killed.
"""

import logging
import os
import signal
import socket
import time
from collections.abc import Sequence

from redis import Redis
from rq import Worker
from rq.worker import SHUTDOWN_SIGNAL

from service.settings import Settings, get_settings
from worker import tasks
from worker.supervise import request_shutdown

log = logging.getLogger(__name__)


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _exited(pid: int) -> bool:
    """Whether our child `pid` has exited, without reaping it (RQ reaps it)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


class LaunchbayWorker(Worker):
    """RQ's forking worker, with a cold shutdown that lets the job stop its processes first."""

    # How long a horse may take to stop its job's processes and record the attempt.
    horse_stop_timeout_s: float = 30.0

    def setup_work_horse_signals(self) -> None:
        super().setup_work_horse_signals()
        signal.signal(signal.SIGTERM, request_shutdown)

    def kill_horse(self, sig: signal.Signals = SHUTDOWN_SIGNAL) -> None:
        pid = self.horse_pid
        if pid and sig == SHUTDOWN_SIGNAL and not _exited(pid):
            log.warning("worker %s: asking horse %s to stop its job first", self.name, pid)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + self.horse_stop_timeout_s
            while time.monotonic() < deadline and not _exited(pid):
                time.sleep(0.1)
        super().kill_horse(sig)


def preload() -> None:
    """Import, in the worker, what every work horse needs, so a forked horse starts its job
    at once instead of importing torch and SQLAlchemy's dialects each time."""
    import sqlalchemy.dialects.postgresql  # noqa: F401
    import sqlalchemy.dialects.sqlite  # noqa: F401

    import jobs.recipes  # noqa: F401
    import worker.attempt  # noqa: F401
    from worker.prepare import detect_cuda

    detect_cuda()


def run_worker(
    queues: Sequence[str] = ("default",),
    burst: bool = False,
    settings: Settings | None = None,
    *,
    name: str | None = None,
    logging_level: str = "INFO",
) -> bool:
    """Run a worker on `queues` until shut down (or, with `burst`, until they are empty).

    Returns whether it ran any job (RQ's `Worker.work`).
    """
    settings = settings or get_settings()
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
    tasks.configure(settings)
    preload()
    worker = LaunchbayWorker(
        list(queues),
        connection=Redis.from_url(settings.redis_url),
        name=name or default_worker_name(),
    )
    worker.horse_stop_timeout_s = settings.cancel_grace_s + 20.0
    return bool(worker.work(burst=burst, logging_level=logging_level))
