"""GPU placement on one machine: workers with their own `--gpus`, the devices they report in
GET /v1/workers, the CUDA_VISIBLE_DEVICES their jobs get, jobs too large for a worker, and a
worker refused GPUs another one owns. On a machine without CUDA the ids only size and place
the jobs, whose ranks run on CPU."""

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from tests.conftest import make_stack
from tests.support.procs import wait_until
from tests.support.stack import Stack

# Without CUDA, any ids do; with CUDA, a worker refuses ids that CUDA does not see.
pytestmark = pytest.mark.skipif(
    0 < torch.cuda.device_count() < 4, reason="needs no CUDA device, or at least 4"
)

# Without CUDA, a worker given GPUs refuses to start unless told its jobs may run on CPU.
CPU_FALLBACK = {"LAUNCHBAY_ALLOW_CPU_FALLBACK": "true"}

SCRIPT = b"""\
import os

names = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RANK", "WORLD_SIZE")
print(" ".join(f"{name}={os.environ.get(name)}" for name in names), flush=True)
"""


@pytest.fixture
def placement_stack(tmp_path: Path, sqlite_url: str, redis_url: str) -> Iterator[Stack]:
    stack = make_stack(tmp_path / "stack", sqlite_url, redis_url)
    try:
        stack.start_api()
        yield stack
    finally:
        stack.stop()


def workers_by_queue(http: httpx.Client) -> dict[str, dict[str, Any]]:
    items = http.get("/v1/workers").json()["items"]
    return {w["queues"][0]: w for w in items}


def submit(http: httpx.Client, code_id: str, queue: str, nproc: int) -> str:
    spec = {
        "name": f"where-{queue}",
        "code": {"code_id": code_id, "entrypoint": "where.py"},
        "queue": queue,
        "nproc_per_node": nproc,
    }
    created = http.post("/v1/jobs", json=spec)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def rank_lines(http: httpx.Client, job_id: str) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for item in http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 1000}).json()["items"]:
        lines.setdefault(item["rank"], []).append(item["line"])
    return lines


def test_workers_split_the_gpus_of_a_machine(placement_stack: Stack) -> None:
    stack = placement_stack
    with stack.client() as http:
        upload = http.post("/v1/code", files={"file": ("where.py", io.BytesIO(SCRIPT))})
        assert upload.status_code == 201, upload.text
        code_id = upload.json()["code_id"]
        # Accepted while no worker serves its queue (one may come); the dispatcher then places
        # it nowhere, and says why.
        too_big = submit(http, code_id, "pair-b", nproc=3)
    stack.start_worker("pair-a", args=["--gpus", "0,1"], **CPU_FALLBACK)
    stack.start_worker("pair-b", args=["--gpus", "2, 3"], **CPU_FALLBACK)
    with stack.client() as http:
        assert wait_until(lambda: len(workers_by_queue(http)) == 2, timeout=90), stack.worker_logs()
        workers = workers_by_queue(http)
        assert workers["pair-a"]["devices"] == ["0", "1"]
        assert workers["pair-b"]["devices"] == ["2", "3"]
        assert workers["pair-a"]["host"] == workers["pair-b"]["host"]

        # A third worker on GPUs both others hold refuses to start, naming who holds which.
        third = stack.start_worker("pair-c", args=["--gpus", "3,1"], **CPU_FALLBACK)
        third.wait(timeout=90)
        assert third.returncode == 1, stack.worker_logs()
        refusal = (stack.root / "worker-2.log").read_text()
        host = workers["pair-a"]["host"]
        assert f"GPUs already owned on host {host}" in refusal
        assert f"1 by worker {workers['pair-a']['name']}" in refusal
        assert f"3 by worker {workers['pair-b']['name']}" in refusal
        # It has exited: whatever it would have registered is there by now.
        assert sorted(workers_by_queue(http)) == ["pair-a", "pair-b"]

        jobs = {queue: submit(http, code_id, queue, nproc=2) for queue in ("pair-a", "pair-b")}
        # Once the queue's live workers are known, one that none of them could run is refused.
        refused = http.post(
            "/v1/jobs",
            json={
                "name": "where-too-big",
                "code": {"code_id": code_id, "entrypoint": "where.py"},
                "queue": "pair-b",
                "nproc_per_node": 3,
            },
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["code"] == "never_fits"
        one_rank = submit(http, code_id, "pair-b", nproc=1)

        for queue, visible in (("pair-a", "0,1"), ("pair-b", "2,3")):
            job = stack.wait_for_state(http, jobs[queue], {"succeeded"})
            assert job["worker"] == workers[queue]["name"]
            lines = rank_lines(http, jobs[queue])
            for rank in (0, 1):
                expected = (
                    f"CUDA_VISIBLE_DEVICES={visible} CUDA_DEVICE_ORDER=PCI_BUS_ID "
                    f"RANK={rank} WORLD_SIZE=2"
                )
                assert expected in lines[rank], lines

        # A job sees the first nproc_per_node of its worker's GPUs.
        stack.wait_for_state(http, one_rank, {"succeeded"})
        expected = "CUDA_VISIBLE_DEVICES=2 CUDA_DEVICE_ORDER=PCI_BUS_ID RANK=0 WORLD_SIZE=1"
        assert expected in rank_lines(http, one_rank)[0]

        waiting = http.get(f"/v1/jobs/{too_big}").json()
        assert waiting["state"] == "queued"
        assert waiting["pending_reason"] == (
            "no worker set fits: needs 1 worker(s) with 3 device(s) on queue 'pair-b', 0 live"
        )
        assert http.post(f"/v1/jobs/{too_big}/cancel").status_code == 202
