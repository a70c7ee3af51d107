"""Adding an executor is one module plus its registration (docs/architecture.md, "The
executor"): the tests' own executor (`tests/support/subprocess_executor.py`: each task a child
process of the API running the worker's generic node entry, `python -m worker.node`; no RQ,
no worker process), registered in the API process, runs a real job end to end: the real API
over HTTP, a real database, real torchrun with gloo on CPU."""

import socket
import sys
from pathlib import Path

from redis import Redis
from rq import Queue

from tests.conftest import make_stack
from tests.support.subprocess_executor import SCRIPT

QUEUE = "local"
SPEC = {
    "name": "by-subprocess",
    "recipe": "synthetic",
    "nproc_per_node": 2,
    "queue": QUEUE,
    "config": {"epochs": 1},
}


def test_a_registered_executor_runs_a_job_with_no_worker(
    tmp_path: Path, sqlite_url: str, redis_url: str
) -> None:
    stack = make_stack(tmp_path / "stack", sqlite_url, redis_url, LAUNCHBAY_SUBPROCESS_QUEUES=QUEUE)
    try:
        stack.start_api(launchbay=(sys.executable, SCRIPT))
        with stack.client() as http:
            dry = http.post("/v1/dry-run", json=SPEC).json()
            assert (dry["executor"], dry["queue"], dry["sbatch_script"]) == (
                "subprocess",
                QUEUE,
                None,
            ), dry
            assert dry["tasks"] == [{"task_id": f"subprocess-{dry['job_id']}-1", "node": None}]
            other = http.post("/v1/dry-run", json={**SPEC, "queue": "default"}).json()
            assert other["executor"] == "rq", "the other queues stay RQ's"

            created = http.post("/v1/jobs", json=SPEC)
            assert created.status_code == 201, created.text
            job_id = created.json()["id"]
            job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=240)
            metrics = http.get(f"/v1/jobs/{job_id}/metrics").json()
            logs = http.get(f"/v1/jobs/{job_id}/logs").json()
    finally:
        stack.stop()

    # Run by the API's child (`host:pid`), through nothing of RQ.
    assert job["worker"].startswith(f"{socket.gethostname()}:"), job
    assert job["attempt"] == 1 and job["exit_code"] == 0
    assert metrics["items"], metrics
    assert logs["items"], logs
    child_output = stack.data_dir / "runs" / job_id / f"subprocess-{job_id}-1.out"
    assert child_output.is_file()
    redis = Redis.from_url(redis_url)
    try:
        assert Queue(QUEUE, connection=redis).count == 0
    finally:
        redis.close()
