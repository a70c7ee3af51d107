"""The supervisor's CPU priority while its job's ranks run.

Where the ranks use every core (CPU training), a supervisor that pre-empts a rank stalls all
of them at the next collective; at a lower priority the scheduler runs it in their gaps
instead. Its nice value alone does not do that where the kernel groups tasks by session
(``kernel.sched_autogroup_enabled``, on by default on desktop and server kernels alike): a
nice value then counts only against the tasks of the same session, and every rank runs in a
session of its own (torchrun starts each so, and the launcher is started so too), so the
supervisor's session competed with each rank at full weight. The session's own nice value
(``/proc/self/autogroup``) is what counts between sessions; new sessions start at 0, so the
ranks keep their priority.
"""

import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SUPERVISOR_NICENESS = 10
AUTOGROUP = Path("/proc/self/autogroup")


def autogroup_nice(path: Path = AUTOGROUP) -> int | None:
    """This session's nice value (``/autogroup-<n> nice <v>``); None without autogroups."""
    try:
        return int(path.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def set_autogroup_nice(value: int, path: Path = AUTOGROUP) -> bool:
    """Set it (raising a session's priority again needs CAP_SYS_NICE, as for a nice value)."""
    try:
        path.write_text(str(value))
        return True
    except OSError as exc:
        log.debug("cannot set the session's nice value to %d: %s", value, exc)
        return False


def yield_cpu_to_ranks(path: Path = AUTOGROUP) -> Callable[[], None]:
    """Lower the priority of every thread of this process and of its session's autogroup;
    returns what gives the session its priority back (the threads keep theirs: the work
    horse ends with its attempt)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), SUPERVISOR_NICENESS)
        except (OSError, ValueError):
            log.debug("cannot lower the priority of thread %s", tid, exc_info=True)
    before = autogroup_nice(path)
    if before is None or before >= SUPERVISOR_NICENESS:
        return lambda: None
    if not set_autogroup_nice(SUPERVISOR_NICENESS, path):
        return lambda: None

    def restore() -> None:
        set_autogroup_nice(before, path)

    return restore
