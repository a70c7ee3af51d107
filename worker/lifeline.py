"""Run a command that dies with the process that started it (Linux).

    python -I -S lifeline.py PARENT_PID SIGNAL -- COMMAND [ARGS...]

asks the kernel to send SIGNAL to this process when its parent exits (``PR_SET_PDEATHSIG``,
which an exec keeps), exits at once if the parent is no longer PARENT_PID (it died before the
request took effect), waits until the supervisor has put it in the job's cgroup when there is one
(``LAUNCHBAY_CGROUP``, see `worker.cgroups`: nothing of the job may start outside it), records
its PID as ``LAUNCHBAY_LAUNCHER_PID`` for the ranks (see
`rank_main.py`), then execs COMMAND in this very process: the launcher keeps this PID.

`worker.process_tree.start_launcher` starts torchrun through it with SIGTERM, so a supervisor
that is SIGKILLed (or dies any other way) still has torchrun stop the ranks. A wrapper rather than
a `preexec_fn`: the supervisor has threads, and code run between fork and exec may deadlock.
Like `rank_main.py` it is run as a script and imports only the standard library.
"""

import ctypes
import os
import sys
import time

PR_SET_PDEATHSIG = 1
# Copies of `jobs.contract.env`'s names (this script imports nothing of Launchbay); a unit test
# holds them equal (tests/unit/worker/test_standalone_copies.py).
LAUNCHER_PID_ENV = "LAUNCHBAY_LAUNCHER_PID"
CGROUP_ENV = "LAUNCHBAY_CGROUP"
CPU_AFFINITY_ENV = "LAUNCHBAY_CPU_AFFINITY"
CGROUP_WAIT_S = 30.0
USAGE = "usage: lifeline.py PARENT_PID SIGNAL -- COMMAND [ARGS...]"


def die_with_parent(signal_number: int) -> bool:
    """Have `signal_number` sent to this process when its parent exits; False where the
    platform cannot (then nothing changes)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def wait_for_cgroup() -> None:
    """Return once this process is in the job's cgroup named by CGROUP_ENV (if any); exit
    rather than run the command outside it."""
    wanted = os.environ.pop(CGROUP_ENV, "")
    count, _, suffix = wanted.partition(":")
    if not count.isdigit() or not suffix:
        return
    deadline = time.monotonic() + CGROUP_WAIT_S
    while time.monotonic() < deadline:
        with open("/proc/self/cgroup") as lines:
            inside = sum(line.rstrip("\n").endswith(suffix) for line in lines)
        if inside >= int(count):
            return
        time.sleep(0.005)
    sys.exit(f"lifeline: not moved into the job cgroup {suffix}")


def pin_cpus() -> None:
    """Run on the cores CPU_AFFINITY_ENV names, if any (inherited by all the command starts)."""
    cores = os.environ.pop(CPU_AFFINITY_ENV, "")
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(c) for c in cores.split(",") if c.isdigit()})


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--" or not argv[0].isdigit() or not argv[1].isdigit():
        raise SystemExit(USAGE)
    parent, signal_number, command = int(argv[0]), int(argv[1]), argv[3:]
    die_with_parent(signal_number)
    if os.getppid() != parent:
        os._exit(128 + signal_number)
    wait_for_cgroup()
    pin_cpus()
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
