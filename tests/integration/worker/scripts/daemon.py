"""Rank 0 leaves a daemon: double fork, `setsid`, SIGTERM and SIGHUP ignored, and an
environment with nothing of the job's (only DAEMON_MARKER). Its PID goes to daemon.pid in the
job's checkpoint directory.
Then the rank exits (`exit`) or sleeps until stopped (`wait`)."""

import os
import sys
import time

DAEMON = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
    "time.sleep(600)\n"
)


def start_daemon(pid_file: str, marker: str) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            temp = pid_file + ".tmp"
            with open(temp, "w") as out:
                out.write(str(os.getpid()))
            os.replace(temp, pid_file)
            os.execve(sys.executable, [sys.executable, "-c", DAEMON], {"DAEMON_MARKER": marker})
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + 30
    while not os.path.exists(pid_file):
        if time.monotonic() > deadline:
            sys.exit("the daemon did not start")
        time.sleep(0.01)


if __name__ == "__main__":
    if os.environ.get("RANK", "0") == "0":
        pid_file = os.path.join(os.environ["LAUNCHBAY_OUTPUT_DIR"], "daemon.pid")
        start_daemon(pid_file, os.environ["DAEMON_MARKER"])
        print("daemon started", flush=True)
    if sys.argv[1:] == ["wait"]:
        time.sleep(600)
