"""A rank's error record, written by the SDK before it leaves a failed process group.

`worker/rank_main.py` writes ``<log dir>/rank-<RANK>.error.json`` for an uncaught exception
once the program has unwound. On the error path of ``distributed()`` the SDK writes the same
record first, before it aborts the process group: should the abort itself hang or kill the
rank (NCCL with a collective pending), the worker still finds which rank failed, with what,
and when. rank_main's own record, if the rank lives on, replaces it with the same error.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

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
    record = {
        "rank": int(rank) if rank.isdigit() else 0,
        "local_rank": int(os.environ.get("LOCAL_RANK", "0") or 0),
        "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
        "pid": os.getpid(),
        "exit_code": 1,
        "error": summary,
        "traceback": text,
        "ts": time.time(),
    }
    try:
        target = directory / f"rank-{rank}.error.json"
        temp = target.with_name(f".{target.name}.sdk.tmp")
        temp.write_text(json.dumps(record))
        os.replace(temp, target)
    except OSError:
        pass
