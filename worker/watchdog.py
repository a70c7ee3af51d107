"""The worker's watchdog: when a worker dies without a word (SIGKILL, the OOM killer) in the
middle of an attempt, the attempt is recorded as `worker_lost` at once, not once the reaper
finds its heartbeat stale. That matters most to a multi-node job, whose other nodes would
otherwise record the peer they lost first, as a failure of the job's own.

The worker forks it once as it starts (`watchdog`), before it has threads, and names the
attempt it runs over a pipe (`Watchdog.watching`: a line "<job> <attempt> [<node>]" when the
attempt is taken, "-" when it is over). The watchdog lives in a session of its own (a Ctrl+C
meant for the worker does not reach it) and waits on the pipe. When the pipe ends (the worker
gone, however it went) with an attempt still named, it removes the worker's record (no
dispatcher gives the retry to a dead worker), stops what is left of the attempt's processes
(`worker.orphans`) and records the attempt as lost, retried while `max_retries` allow. A
worker that ends on purpose has named no attempt, or recorded it itself (its cold shutdown).
"""

import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from jobs.states import AttemptRef

log = logging.getLogger(__name__)
IDLE = "-"


class Watchdog:
    """The worker's end of the pipe."""

    def __init__(self, write_fd: int | None) -> None:
        self.write_fd = write_fd

    @contextmanager
    def watching(self, ref: AttemptRef) -> Iterator[None]:
        """While the worker runs attempt `ref`."""
        node = "" if ref.node is None else f" {ref.node}"
        self._say(f"{ref.job_id} {ref.attempt}{node}")
        try:
            yield
        finally:
            self._say(IDLE)

    def _say(self, line: str) -> None:
        if self.write_fd is None:
            return
        try:
            os.write(self.write_fd, f"{line}\n".encode())  # a line: one write, never split
        except OSError as exc:
            log.warning(
                "the worker's watchdog is gone (%s): a death of the worker's is left to the reaper",
                exc,
            )
            self.write_fd = None


def parse_attempt(line: str) -> AttemptRef | None:
    """The attempt a line names; None for `IDLE` or a line not understood."""
    parts = line.split()
    try:
        if len(parts) == 2:
            return AttemptRef(parts[0], int(parts[1]), None)
        if len(parts) == 3:
            return AttemptRef(parts[0], int(parts[1]), int(parts[2]))
    except ValueError:
        pass
    return None


def last_attempt(read_fd: int) -> AttemptRef | None:
    """Read the pipe to its end; the attempt its last line names. Only that line is kept: the
    pipe carries two lines a job for the worker's whole life."""
    last, pending = b"", b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(4096):
            *lines, pending = (pending + chunk).split(b"\n")
            if lines:
                last = lines[-1]
    return parse_attempt((pending or last).decode(errors="replace"))


@contextmanager
def watchdog(on_death: Callable[[AttemptRef], None]) -> Iterator[Watchdog]:
    """Fork the watchdog; `on_death(ref)` runs in it when the worker is gone with `ref` named.
    Yields the worker's end; leaving the block ends the watchdog (nothing named) and reaps it."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the watchdog
        code = 1
        try:
            os.close(write_fd)
            os.setsid()
            for number in (signal.SIGINT, signal.SIGTERM):
                signal.signal(number, signal.SIG_IGN)  # it ends with its worker, as it must
            ref = last_attempt(read_fd)
            if ref is not None:
                on_death(ref)
            code = 0
        except BaseException:
            log.exception("the worker's watchdog failed")
        finally:
            os._exit(code)  # nothing of the worker's (its atexit, its RQ teardown) runs here
    os.close(read_fd)
    dog = Watchdog(write_fd)
    try:
        yield dog
    finally:
        dog.write_fd = None  # told nothing more: its file number may be another file's soon
        os.close(write_fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
