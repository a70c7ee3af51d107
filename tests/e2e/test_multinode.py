"""Multi-node jobs on one machine: several `launchbay worker` processes, each a node, meeting at
torch's c10d rendezvous (docs/multi-node.md), driven and checked over HTTP.

Two workers serve the queue `multi`; the first also serves `solo`, where a 2-node job can never
find its second node. Heartbeats are fast and the reaper takes a node for lost after
LOST_AFTER_S, so the faults are seen in seconds. The stack is on PostgreSQL, so the nodes' joins
and ends, from two worker processes, meet its row locks (on SQLite, 2-node jobs run in
tests/e2e/test_scheduling.py and test_dashboard.py).
"""

import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import psutil
import pytest

from tests.e2e.conftest import stack_of_its_own
from tests.support.procs import job_processes, wait_until
from tests.support.services import postgres_database
from tests.support.stack import Stack

LOST_AFTER_S = 5
SETTINGS = {
    "LAUNCHBAY_WORKER_HOST": "127.0.0.1",
    "LAUNCHBAY_HEARTBEAT_INTERVAL_S": "1",
    "LAUNCHBAY_REAPER_INTERVAL_S": "1",
    "LAUNCHBAY_REAPER_LOST_AFTER_S": str(LOST_AFTER_S),
}


def two_nodes(name: str, queue: str = "multi", **fields: Any) -> dict[str, Any]:
    config = {"log_every_steps": 1, **fields.pop("config", {})}
    return {
        "name": name,
        "recipe": "synthetic",
        "nnodes": 2,
        "nproc_per_node": 1,
        "queue": queue,
        "config": config,
        **fields,
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, postgres_server_url: str) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("multinode")
    workers = [("multi", "solo"), ("multi",)]
    with (
        postgres_database(postgres_server_url) as url,
        stack_of_its_own(root, workers, url, **SETTINGS) as running,
    ):
        yield running


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


def submit(http: httpx.Client, spec: dict[str, Any]) -> str:
    response = http.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def nodes_of(http: httpx.Client, job_id: str, attempt: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(f"/v1/jobs/{job_id}/nodes").json()["items"]
    return [n for n in items if n["attempt"] == attempt]


def attempt_processes(job_id: str, attempt: int) -> list[psutil.Process]:
    found = []
    for proc in job_processes(job_id):
        try:
            if proc.environ().get("LAUNCHBAY_ATTEMPT") == str(attempt):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def worker_running(stack: Stack, http: httpx.Client, job_id: str, node: int) -> psutil.Process:
    """The `launchbay worker` process that runs node `node` of the job."""
    records = http.get("/v1/workers").json()["items"]
    [record] = [
        w for w in records if w["current_job"] == {"id": job_id, "attempt": 1, "node": node}
    ]
    return psutil.Process(record["pid"])


def test_two_workers_run_one_job_of_world_size_two(stack: Stack, http: httpx.Client) -> None:
    spec = two_nodes("two-nodes", config={"epochs": 2}, checkpoint={"keep_last": 2})
    started = time.monotonic()
    job_id = submit(http, spec)
    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
    took_s = time.monotonic() - started
    assert (job["attempt"], job["exit_reason"]) == (1, "completed")

    nodes = nodes_of(http, job_id, 1)
    assert sorted(n["node"] for n in nodes) == [0, 1]
    assert len({n["worker"] for n in nodes}) == 2, "never two nodes on one worker"
    assert {n["state"] for n in nodes} == {"succeeded"}
    [host] = [n for n in nodes if n["endpoint"]]
    assert host["endpoint"].startswith("127.0.0.1:")

    # Only global rank 0 reports: every (step, name) once, one set of checkpoints.
    points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
    keys = [(p["step"], p["name"]) for p in points]
    assert keys and len(keys) == len(set(keys))
    assert points[-1]["step"] == job["progress"]["total_steps"]
    checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    assert 1 <= len(checkpoints) <= 2 + 1  # keep_last plus the best
    assert len({c["path"] for c in checkpoints}) == len(checkpoints)
    download = http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
    assert download.status_code == 200 and download.content

    # Logs of both nodes, labelled node/rank; rank 0 saw a world of two.
    logs = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000}).json()["items"]
    labels = {(line["node"], line["rank"]) for line in logs}
    assert (
        len(labels) == 2 and {n for n, _ in labels} == {0, 1} and {r for _, r in labels} == {0, 1}
    )
    assert any("world 2 on cpu" in line["line"] for line in logs if line["rank"] == 0)
    node_1 = http.get(f"/v1/jobs/{job_id}/logs", params={"node": 1}).json()["items"]
    assert node_1 and {line["node"] for line in node_1} == {1}
    assert wait_until(lambda: not job_processes(job_id), timeout=10)
    print(f"\nmulti-node: 2 nodes x 1 rank succeeded in {took_s:.1f} s, {len(points)} points")


def test_a_job_wider_than_its_queue_is_refused_and_no_node_waits_alone(
    stack: Stack, http: httpx.Client
) -> None:
    """Only the first worker serves `solo`: the dispatcher admits every node of a job at once,
    so a two-node job there could only ever wait; it is refused at submission (422
    `never_fits`), no node of it starts alone, and the worker runs the next job."""
    response = http.post("/v1/jobs", json=two_nodes("alone", queue="solo", rendezvous_timeout_s=4))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "never_fits" and error["detail"]["nnodes"] == 2, error
    names = [j["name"] for j in http.get("/v1/jobs", params={"limit": 200}).json()["items"]]
    assert "alone" not in names
    after = submit(
        http,
        {"name": "after", "recipe": "synthetic", "nproc_per_node": 1, "queue": "solo"},
    )
    assert stack.wait_for_state(http, after, {"succeeded"}, timeout=120)["attempt"] == 1


def test_a_timeout_stops_every_node(stack: Stack, http: httpx.Client) -> None:
    spec = two_nodes("too-long", timeout_s=12, config={"epochs": 100, "sleep_per_step_s": 0.2})
    job_id = submit(http, spec)
    job = stack.wait_for_state(http, job_id, {"failed"}, timeout=60)
    assert job["exit_reason"] == "timeout", job
    assert "stopped after timeout_s=12 s" in job["message"]
    assert wait_until(lambda: not job_processes(job_id), timeout=10)
    # The node that did not time out first records its end once it has stopped too.
    ended = {"failed", "stopped"}
    assert wait_until(lambda: {n["state"] for n in nodes_of(http, job_id, 1)} <= ended, 10)


def test_a_killed_node_worker_stops_every_node_and_the_job_is_retried(
    stack: Stack, http: httpx.Client
) -> None:
    spec = two_nodes("node-killed", max_retries=1, config={"epochs": 3, "sleep_per_step_s": 0.2})
    job_id = submit(http, spec)
    stack.wait_for_state(http, job_id, {"running"}, timeout=60)
    assert wait_until(lambda: http.get(f"/v1/jobs/{job_id}/metrics").json()["items"], 60)
    first = attempt_processes(job_id, 1)
    assert len(first) >= 4  # torchrun and one rank on each node

    victim = worker_running(stack, http, job_id, 1)
    victim.send_signal(signal.SIGKILL)  # its torchrun gets SIGTERM from the kernel
    killed_at = time.monotonic()
    assert wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["attempt"] == 2, 30)
    assert wait_until(lambda: not attempt_processes(job_id, 1), timeout=LOST_AFTER_S + 10)
    stopped_s = time.monotonic() - killed_at
    job = http.get(f"/v1/jobs/{job_id}").json()
    assert "ended with worker_lost: node 1" in job["message"], job
    [lost] = [n for n in nodes_of(http, job_id, 1) if n["node"] == 1]
    assert lost["exit_reason"] == "worker_lost", lost

    stack.workers = [w for w in stack.workers if w.poll() is None]
    stack.start_worker("multi")  # a second node for attempt 2
    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
    # Attempt 2, or 3 when attempt 2 was admitted onto the killed worker before the dispatcher
    # knew it gone (a lost admission: it uses none of max_retries, docs/scheduling.md).
    assert job["attempt"] in (2, 3), job
    assert wait_until(lambda: not job_processes(job_id), timeout=10)
    print(f"\nmulti-node: both nodes of attempt 1 stopped {stopped_s:.1f} s after the kill")


def test_a_frozen_node_is_reaped_and_cancel_stops_every_node(
    stack: Stack, http: httpx.Client
) -> None:
    spec = two_nodes("node-frozen", max_retries=1, config={"epochs": 50, "sleep_per_step_s": 0.2})
    job_id = submit(http, spec)
    stack.wait_for_state(http, job_id, {"running"}, timeout=60)
    worker = worker_running(stack, http, job_id, 1)
    worker.send_signal(signal.SIGSTOP)  # its heartbeats stop; its ranks go on
    frozen_at = time.monotonic()
    try:
        job = stack.wait_for_state(http, job_id, {"queued", "starting"}, timeout=LOST_AFTER_S + 15)
        reaped_s = time.monotonic() - frozen_at
        assert "worker_lost" in job["message"] and "node 1" in job["message"], job
        # The other node sees the attempt is over and stops; with it the frozen node's ranks.
        # 20 s ran out once in the full suite on two cores; alone it takes a few seconds.
        assert wait_until(lambda: not attempt_processes(job_id, 1), timeout=45), [
            p.pid for p in attempt_processes(job_id, 1)
        ]
        stopped_s = time.monotonic() - frozen_at
    finally:
        worker.send_signal(signal.SIGCONT)

    # The worker, back, finds its attempt over and takes the next: attempt 2 runs on both
    # workers; a cancel stops both.
    stack.wait_for_state(http, job_id, {"running"}, timeout=90)
    assert job_processes(job_id)
    response = http.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202
    job = stack.wait_for_state(http, job_id, {"cancelled"}, timeout=30)
    assert not job_processes(job_id), "cancelled only once no process of any node is left"
    assert {n["state"] for n in nodes_of(http, job_id, 2)} == {"cancelled"}
    print(
        f"\nmulti-node: a frozen node reaped after {reaped_s:.1f} s, every process of its "
        f"attempt gone after {stopped_s:.1f} s; cancel stopped both nodes"
    )


def test_a_node_whose_worker_froze_before_joining_ends_the_attempt_at_once(
    stack: Stack, http: httpx.Client
) -> None:
    """A 2-node job admitted onto a worker that froze (SIGSTOP) before it took its node: the
    other node joins and waits in the rendezvous (600 s here, the default). The dispatcher ends
    the attempt as `worker_lost` once the frozen worker has been gone for half of
    LOST_AFTER_S, the node that joined stops, and the retry runs once the worker is back (its
    task of attempt 1, taken then, runs nothing)."""

    def serving_multi() -> int:
        return sum("multi" in w["queues"] for w in http.get("/v1/workers").json()["items"])

    assert wait_until(lambda: serving_multi() == 2, timeout=60)
    frozen = [w for w in stack.workers if w.poll() is None][-1]

    def just_heartbeat() -> bool:  # so the dispatcher still counts it live at the admission
        [record] = [w for w in http.get("/v1/workers").json()["items"] if w["pid"] == frozen.pid]
        beat = datetime.fromisoformat(record["last_heartbeat"].replace("Z", "+00:00"))
        return (datetime.now(UTC) - beat).total_seconds() < 0.5

    assert wait_until(just_heartbeat, timeout=30, interval=0.05)
    os.kill(frozen.pid, signal.SIGSTOP)
    thawed = False
    try:
        job_id = submit(http, two_nodes("node-never-joined", max_retries=1))
        frozen_at = time.monotonic()
        stack.wait_for_state(http, job_id, {"starting"}, timeout=30)  # one node joined
        assert wait_until(lambda: http.get(f"/v1/jobs/{job_id}").json()["attempt"] == 2, 40)
        ended_s = time.monotonic() - frozen_at
        assert wait_until(lambda: not attempt_processes(job_id, 1), timeout=30)
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert "ended with worker_lost" in job["message"], job
        assert "went away before the node joined" in job["message"], job
        os.kill(frozen.pid, signal.SIGCONT)
        thawed = True
        job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
    finally:
        if not thawed:
            os.kill(frozen.pid, signal.SIGCONT)
    assert job["attempt"] == 2, job
    states = {n["state"] for n in nodes_of(http, job_id, 1)}
    assert states == {"failed", "stopped"}, nodes_of(http, job_id, 1)
    assert wait_until(lambda: not job_processes(job_id), timeout=10)
    print(f"\nmulti-node: a node never joined; its attempt ended {ended_s:.1f} s after the freeze")
