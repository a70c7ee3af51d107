"""What rank 0 keeps in its checkpoint directory for the job's next attempt: how far its
TensorBoard files were read (`jobs.capture.tensorboard.STATE_FILE`), so that a retried attempt
does not record them again.

Each attempt's checkpoint directory is its own and goes when the attempt ends, so the worker
carries the file across: `keep` copies it to ``runs/<job>/`` (the worker's) when nothing of the
attempt runs any more, `restore` puts it in the next attempt's checkpoint directory before its
ranks start. The job wrote it: it is read without following a link, only as a regular file and
only up to `MAX_BYTES`; what it holds is the reader's own business (it checks every field).
"""

import logging
import os
import stat
from pathlib import Path

from jobs.capture.tensorboard import STATE_FILE
from worker.launch import RunPaths

log = logging.getLogger(__name__)

MAX_BYTES = 16 * 1024**2


def _job_dir(paths: RunPaths) -> Path:
    return paths.layout.job_runs(paths.job_id)


def _read(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        return handle.read(MAX_BYTES + 1)[:MAX_BYTES]


def _write(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as handle:
        handle.write(data)
    os.replace(temp, path)


def keep(paths: RunPaths, checkpoint_dir: Path | None = None) -> None:
    """Copy the state from the attempt's checkpoint directory (or `checkpoint_dir`, an earlier
    attempt's) to the job's run directory; nothing when there is none."""
    data = _read((checkpoint_dir or paths.checkpoint_dir) / STATE_FILE)
    if data is None:
        return
    try:
        _write(_job_dir(paths) / STATE_FILE, data)
    except OSError:
        log.warning("%s: the TensorBoard reading state was not kept", paths.job_id, exc_info=True)


def restore(paths: RunPaths) -> None:
    """Put the kept state in this attempt's checkpoint directory (call before it is given to
    the attempt's job user)."""
    data = _read(_job_dir(paths) / STATE_FILE)
    if data is None:
        return
    try:
        _write(paths.checkpoint_dir / STATE_FILE, data)
    except OSError:
        log.warning("%s: the TensorBoard reading state was not restored", paths.job_id)
