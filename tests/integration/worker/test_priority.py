"""While a job's ranks run, its supervisor yields the CPU to them: every thread of it at a
lower priority, and its session too (under the kernel's autogroups a nice value counts only
within a session, and each rank is in a session of its own); the ranks keep theirs, and the
supervisor's session gets its priority back when the attempt ends."""

import json
import os
from pathlib import Path

import pytest

from tests.integration.worker.conftest import WorkerEnv
from worker.priority import SUPERVISOR_NICENESS, autogroup_nice

pytestmark = pytest.mark.skipif(
    autogroup_nice() is None or os.geteuid() != 0,
    reason="needs the kernel's autogroups and root (raising the session's priority back)",
)


def test_the_supervisor_yields_to_the_ranks_and_takes_its_priority_back(
    wenv: WorkerEnv,
) -> None:
    before = autogroup_nice()
    env = {"SUPERVISOR_PID": str(os.getpid())}  # the test process supervises the job
    job_id = wenv.submit("priority_probe.py", launcher="python", nproc_per_node=1, env=env)
    try:
        wenv.run(job_id)
        assert wenv.job(job_id).state == "succeeded", wenv.job(job_id).message
        report_file = Path(wenv.settings.checkpoints_dir, job_id, "priority.json")
        report = json.loads(report_file.read_text())
        assert report["own_session"]
        assert (report["nice"], report["session_nice"]) == (0, "0")
        assert report["supervisor_session_nice"] == str(SUPERVISOR_NICENESS)
        assert set(report["supervisor_threads_nice"]) == {SUPERVISOR_NICENESS}
        assert autogroup_nice() == before
    finally:
        for tid in os.listdir("/proc/self/task"):  # this test process is the next test's too
            os.setpriority(os.PRIO_PROCESS, int(tid), 0)
