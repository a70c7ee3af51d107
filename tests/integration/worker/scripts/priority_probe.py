"""Reports the scheduling priority the job runs at, and its supervisor's ($SUPERVISOR_PID),
while it runs: nice values and session (autogroup) nice values, as JSON in its checkpoint
directory."""

import json
import os
from pathlib import Path


def autogroup(pid: str) -> str:
    return Path(f"/proc/{pid}/autogroup").read_text().split()[-1]


supervisor = os.environ["SUPERVISOR_PID"]
report = {
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "session_nice": autogroup("self"),
    "own_session": os.getsid(0) == os.getpid(),
    "supervisor_session_nice": autogroup(supervisor),
    "supervisor_threads_nice": [
        os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in os.listdir(f"/proc/{supervisor}/task")
    ],
}
Path(os.environ["LAUNCHBAY_CHECKPOINT_DIR"], "priority.json").write_text(json.dumps(report))
