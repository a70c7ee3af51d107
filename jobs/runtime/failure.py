"""A rank's error record, written by the SDK before it leaves a failed process group.

`worker/rank_main.py` writes ``<log dir>/rank-<RANK>.error.json`` (`jobs.contract.rank_files`)
for an uncaught exception once the program has unwound. On the error path of
``distributed()`` the SDK writes the same record first, before it aborts the process group:
should the abort itself hang or kill the rank (NCCL with a collective pending), the worker
still finds which rank failed, with what, and when. rank_main's own record, if the rank lives
on, replaces it with the same error.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from jobs.contract.rank_files import ErrorRecord, write_error_record, write_finished
from jobs.runtime import env


def describe_error(exc: BaseException) -> tuple[str, str]:
    """("Type: message", the traceback as Python prints it), as rank_main.py writes them."""
    summary = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return summary, "".join(traceback.format_exception(exc))


def record_rank_error(exc: BaseException) -> None:
    """Say on stderr (the rank's log) that this rank failed, and leave its error record in
    LAUNCHBAY_LOG_DIR (only under the worker); never raises."""
    rank = os.environ.get("RANK", "0") or "0"
    summary, text = describe_error(exc)
    try:
        print(
            f"[launchbay] rank {rank} failed ({summary.splitlines()[0]}); "
            "aborting its process group",
            file=sys.stderr,
            flush=True,
        )
    except (OSError, ValueError):
        pass
    directory = env.log_dir()
    if directory is None:
        return
    record = ErrorRecord(
        rank=int(rank) if rank.isdigit() else 0,
        local_rank=int(os.environ.get("LOCAL_RANK", "0") or 0),
        restart=_restart(),
        pid=os.getpid(),
        exit_code=1,
        error=summary,
        traceback=text,
        ts=time.time(),
    )
    try:
        write_error_record(directory, record, writer="sdk")
    except OSError:
        pass


def record_rank_finished() -> None:
    """Leave ``rank-<RANK>.finished`` in LAUNCHBAY_LOG_DIR (only under the worker): this rank
    left `distributed()` with its work done, so a signal at interpreter exit (torch + gloo
    sometimes abort a rank there) does not make the job a failure. Never raises."""
    directory = env.log_dir()
    if directory is None:
        return
    try:
        write_finished(directory, os.environ.get("RANK", "0") or "0", _restart())
    except OSError:
        pass


def _restart() -> int:
    """The elastic restart this rank runs in."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
