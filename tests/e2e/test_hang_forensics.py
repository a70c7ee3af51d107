"""Hang forensics with real torchrun: a 2-rank gloo job deadlocks (rank 1 skips the
all_reduce rank 0 waits in); `launchbay stacks` prints both ranks' stacks while it runs, and
the hang watchdog kills it (`exit_reason` `hang`) with stacks that show who waits and who is
elsewhere."""

import os
import subprocess
from typing import Any

import httpx

from tests.support.procs import job_processes, wait_until
from tests.support.stack import LAUNCHBAY, Stack

DEADLOCK = """\\
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} ready", flush=True)
if rank == 0:
    dist.all_reduce(torch.ones(1))  # rank 1 never joins it
else:
    while True:  # busy elsewhere, not in a collective
        time.sleep(0.1)
"""
# Counted from the launch: above the ranks' start on a loaded machine (torch's import, gloo).
HANG_TIMEOUT_S = 15


def log_lines(http: httpx.Client, job_id: str) -> list[str]:
    return [item["line"] for item in http.get(f"/v1/jobs/{job_id}/logs").json()["items"]]


def test_a_deadlocked_collective_is_a_hang_whose_stacks_name_the_missing_rank(
    sqlite_stack: Stack,
) -> None:
    stack = sqlite_stack
    with stack.client() as http:
        files = {"file": ("deadlock.py", DEADLOCK.encode(), "text/x-python")}
        code_id = http.post("/v1/code", files=files).json()["code_id"]
        spec = {
            "name": "deadlock",
            "code": {"code_id": code_id, "entrypoint": "deadlock.py"},
            "nproc_per_node": 2,
            "device": "cpu",
            "hang_timeout_s": HANG_TIMEOUT_S,
        }
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
        assert wait_until(
            lambda: {"rank 0 ready", "rank 1 ready"} <= set(log_lines(http, job_id)), timeout=60
        ), stack.worker_logs()

        env = {**os.environ, "LAUNCHBAY_API_URL": stack.url, "LAUNCHBAY_TOKEN": stack.admin_token}
        printed = subprocess.run(
            [LAUNCHBAY, "stacks", job_id, "--timeout", "30"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert printed.returncode == 0, (printed.stderr, stack.worker_logs())
        # Every rank's stack: the ones asked for, or the hang's if the watchdog came first.
        out = printed.stdout
        assert "== rank 0 " in out and "== rank 1 " in out, out
        assert "all_reduce" in out and "deadlock.py" in out, out
        asked = out.startswith("# request")

        job = stack.wait_for_state(http, job_id, {"failed"}, timeout=60)
        assert job["exit_reason"] == "hang", job
        stacks: dict[str, Any] = http.get(f"/v1/jobs/{job_id}/stacks").json()
    by_reason: dict[str, dict[int, dict[str, Any]]] = {}
    for item in stacks["items"]:
        assert set(item) >= {"rank", "node", "ts", "reason", "stack"}
        by_reason.setdefault(item["reason"], {}).setdefault(item["rank"], item)
    assert set(by_reason) == ({"request", "hang"} if asked else {"hang"})
    hang = by_reason["hang"]
    assert sorted(hang) == [0, 1]
    assert hang[0]["in_collective"] and "all_reduce" in hang[0]["stack"]
    assert not hang[1]["in_collective"] and "all_reduce" not in hang[1]["stack"]
    assert "deadlock.py" in hang[1]["stack"]
    summary = stacks["summary"]
    assert (summary["reason"], summary["in_collective"], summary["elsewhere"]) == ("hang", [0], [1])
    assert summary["behind"] == [1]
    assert wait_until(lambda: not job_processes(job_id), timeout=10)
    print(f"\nhang forensics: {summary['note']}")
