"""The dispatcher with real workers on one machine, CPU slots standing in for GPUs
(docs/scheduling.md): 2-node jobs admitted whole while the API process that dispatches is
killed mid-admission and a second one takes over; then, on a pool of 4 slots while those run,
fair share between owners, packing jobs of different sizes, an owner over quota, and
preemption that resumes from a checkpoint.

One stack for the module: three 1-slot workers on `default`, a pool of three workers sharing
4 slots on `pack`, and a second API process, which the fixtures wait for (it answers, every
worker is registered). Each test stands alone: the 2-node jobs (`gang`) are started by the
first test that asks for them, whichever runs first.
"""

import io
import signal
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from devstack.procs import free_port, start, stop
from tests.e2e.conftest import stack_of_its_own
from tests.support.procs import job_processes, wait_until
from tests.support.stack import LAUNCHBAY, Stack

SETTINGS = {
    "LAUNCHBAY_PREEMPTION": "true",
    "LAUNCHBAY_DISPATCH_LEASE_S": "3",
    "LAUNCHBAY_WORKER_HOST": "127.0.0.1",
    "LAUNCHBAY_HEARTBEAT_INTERVAL_S": "1",
}
TERMINAL = {"succeeded", "failed", "cancelled"}

# Sleeps SLEEP_S, says which slots and cores it has, and which rank of how many it is.
SHOW = b"""\
import os, sys, time
time.sleep(float(os.environ.get("SLEEP_S", "0")))
print("slots", os.environ.get("LAUNCHBAY_CPU_SLOTS"), "cores",
      ",".join(map(str, sorted(os.sched_getaffinity(0)))),
      "rank", os.environ.get("RANK"), "of", os.environ.get("WORLD_SIZE"), flush=True)
"""

# Counts to 8 steps, reporting each; saves a checkpoint when stopped (SIGTERM) and resumes
# from LAUNCHBAY_RESUME_FROM.
COUNTER = b"""\
import json, os, signal, sys, time
directory, events = os.environ["LAUNCHBAY_CHECKPOINT_DIR"], os.environ["LAUNCHBAY_EVENTS_FILE"]
resume = os.environ.get("LAUNCHBAY_RESUME_FROM")
step = json.load(open(resume))["step"] if resume else 0
print("start at", step, flush=True)
def report(line):
    with open(events, "a") as f:
        f.write(json.dumps(line) + "\\n")
def stop(*_):
    name = f"step-{step:04d}.json"
    with open(os.path.join(directory, name + ".tmp"), "w") as f:
        json.dump({"step": step}, f)
    os.rename(os.path.join(directory, name + ".tmp"), os.path.join(directory, name))
    report({"type": "checkpoint", "path": name, "step": step})
    print("saved at", step, flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
while step < 8:
    time.sleep(0.25)
    step += 1
    report({"type": "metric", "step": step, "metrics": {"step": step}})
print("done at", step, flush=True)
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of_its_own(tmp_path_factory.mktemp("scheduling"), [], **SETTINGS) as running:
        for _ in range(3):
            running.start_worker(args=["--slots", "1"])
        for _ in range(3):
            running.start_worker("pack", args=["--slots", "4", "--pool", "p"])
        try:
            yield running
        finally:
            for worker in running.workers:  # all at once; the stack then waits for each
                if worker.poll() is None:
                    worker.send_signal(signal.SIGTERM)


@pytest.fixture(scope="module")
def second_api(stack: Stack) -> Iterator[httpx.Client]:
    """Another API process on the same database and Redis, once it answers and sees every
    worker of the stack."""
    port = free_port()
    proc = start(
        [LAUNCHBAY, "api", "--host", "127.0.0.1", "--port", str(port)],
        stack.env(),
        stack.root / "api-2.log",
    )
    headers = {"Authorization": f"Bearer {stack.admin_token}"}
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, headers=headers)
    try:
        assert wait_until(lambda: _answers(client), 60), (stack.root / "api-2.log").read_text()
        assert wait_until(lambda: len(client.get("/v1/workers").json()["items"]) == 6, 90), (
            stack.worker_logs()
        )
        yield client
    finally:
        client.close()
        stop(proc)


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    """The stack's own API, the dispatcher until `gang` kills it."""
    with stack.client() as client:
        yield client


def token(http: httpx.Client, name: str) -> str:
    made = http.post("/v1/tokens", json={"name": name})
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def spec(code: dict[str, str], script: str = "show.py", **fields: Any) -> dict[str, Any]:
    return {
        "name": script,
        "code": {"code_id": code[script], "entrypoint": script},
        "launcher": "python",
        "nproc_per_node": 1,
        **fields,
    }


def submit(http: httpx.Client, body: dict[str, Any], as_token: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {as_token}"} if as_token else {}
    created = http.post("/v1/jobs", json=body, headers=headers)
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def finished(stack: Stack, http: httpx.Client, job_id: str) -> dict[str, Any]:
    return stack.wait_for_state(http, job_id, TERMINAL, timeout=120)


def at(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def lines_of(http: httpx.Client, job_id: str) -> list[str]:
    items = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 1000}).json()["items"]
    return [item["line"] for item in items]


@pytest.fixture(scope="module")
def gang(stack: Stack, http: httpx.Client, second_api: httpx.Client) -> dict[str, Any]:
    """Three 2-node jobs on the three 1-slot workers, submitted through the second API while
    the first, which dispatches, is killed."""
    leader = http.get("/v1/queue").json()["dispatcher"]
    api = stack.api
    assert leader is not None and api is not None
    assert int(leader["leader"].split(":")[1]) == api.pid
    upload = second_api.post("/v1/code", files={"file": ("show.py", io.BytesIO(SHOW))})
    assert upload.status_code == 201, upload.text
    code = {"show.py": upload.json()["code_id"]}
    body = spec(code, launcher="torchrun", nnodes=2, rendezvous_timeout_s=60)
    ids = [submit(second_api, body)]
    api.send_signal(signal.SIGKILL)  # mid-admission: a pass runs as each submission arrives
    ids += [submit(second_api, body) for _ in range(2)]
    api.wait(timeout=10)
    stack.api = None
    return {"ids": ids, "leader": leader}


def test_another_api_takes_over_from_a_dispatcher_killed_mid_admission(
    second_api: httpx.Client, gang: dict[str, Any]
) -> None:
    def taken_over() -> bool:
        now = second_api.get("/v1/queue").json()["dispatcher"]
        return now is not None and now["token"] > gang["leader"]["token"]

    assert wait_until(taken_over, timeout=30)
    assert second_api.get("/v1/queue").json()["dispatcher"]["leader"] != gang["leader"]["leader"]


def test_owners_share_a_pool(stack: Stack, second_api: httpx.Client) -> None:
    api = second_api
    alice, bob = token(api, "alice"), token(api, "bob")
    code = code_of(api, alice)
    # Her first job ends 2 s before her next two: the lane it frees is the only one free.
    lengths = ("1", "3", "3", "3")
    a = [submit(api, spec(code, queue="pack", env={"SLEEP_S": s}), alice) for s in lengths]
    b = submit(api, spec(code_of(api, bob), queue="pack"), bob)
    jobs = {j: finished(stack, api, j) for j in [*a, b]}
    assert {j["state"] for j in jobs.values()} == {"succeeded"}
    # Three lanes: Alice's first three start at once; the first lane to free goes to Bob,
    # who holds nothing, not to Alice's fourth, though she asked first.
    assert at(jobs[b]["started_at"]) < at(jobs[a[3]]["started_at"])


def test_a_pool_packs_jobs_of_different_sizes_and_a_quota_waits(
    stack: Stack, second_api: httpx.Client
) -> None:
    api = second_api
    carol = token(api, "carol")
    put = api.put("/v1/policies/carol", json={"max_devices": 4})
    assert put.status_code == 200, put.text
    code = code_of(api, carol)
    ids = [
        submit(api, spec(code, queue="pack", nproc_per_node=n, env={"SLEEP_S": "2"}), carol)
        for n in (2, 1, 1)
    ]
    # Carol holds her 4 devices: her fourth job waits, saying why, until one of hers ends.
    fourth = submit(api, spec(code, queue="pack"), carol)

    def waits_for_quota() -> bool:
        job = api.get(f"/v1/jobs/{fourth}").json()
        return job["pending_reason"] == "owner quota: 4 of 4 devices in use (this job needs 1)"

    assert wait_until(waits_for_quota, timeout=30), api.get(f"/v1/jobs/{fourth}").json()
    waiting = api.get("/v1/queue").json()["items"]
    assert [e["job_id"] for e in waiting if e["queue"] == "pack"] == [fourth]
    jobs = [finished(stack, api, j) for j in ids]
    assert {j["state"] for j in jobs} == {"succeeded"}
    # All three ran at once, each on its own slots.
    assert max(at(j["started_at"]) for j in jobs) < min(at(j["finished_at"]) for j in jobs)
    slots = []
    for job_id, size in zip(ids, (2, 1, 1), strict=True):
        [line] = [line for line in lines_of(api, job_id) if line.startswith("slots")]
        mine = line.split()[1].split(",")
        assert len(mine) == size, line
        slots += mine
    assert sorted(slots) == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    last = finished(stack, api, fourth)
    assert last["state"] == "succeeded"
    assert at(last["started_at"]) >= min(at(j["finished_at"]) for j in jobs)


def test_a_higher_priority_job_preempts_a_lower_one_which_resumes(
    stack: Stack, second_api: httpx.Client
) -> None:
    api = second_api
    code = code_of(api, None)
    low = submit(api, spec(code, "counter.py", queue="pack", nproc_per_node=4))

    def counting() -> bool:
        return (api.get(f"/v1/jobs/{low}").json()["progress"]["step"] or 0) >= 2

    assert wait_until(counting, timeout=60)
    high = submit(api, spec(code, queue="pack", priority=10))
    done_high, done_low = finished(stack, api, high), finished(stack, api, low)
    assert done_high["state"] == "succeeded"
    assert (done_low["state"], done_low["attempt"]) == ("succeeded", 2), done_low
    lines = lines_of(api, low)
    saved = int(next(line for line in lines if line.startswith("saved at")).split()[-1])
    assert saved >= 2 and f"start at {saved}" in lines and lines[-1] == "done at 8"
    assert at(done_high["finished_at"]) <= at(done_low["started_at"])
    events = api.get(f"/v1/jobs/{low}/events", timeout=30).text
    assert '"exit_reason": "preempted"' in events or '"exit_reason":"preempted"' in events
    assert not job_processes(low, high)


def test_the_two_node_jobs_ran_whole_and_once(
    stack: Stack, second_api: httpx.Client, gang: dict[str, Any]
) -> None:
    api = second_api
    jobs = [finished(stack, api, j) for j in gang["ids"]]
    assert [(j["state"], j["attempt"]) for j in jobs] == [("succeeded", 1)] * 3, jobs
    spans: dict[str, list[tuple[datetime, datetime, str]]] = {}
    for job_id in gang["ids"]:
        nodes = api.get(f"/v1/jobs/{job_id}/nodes").json()["items"]
        assert sorted(n["node"] for n in nodes) == [0, 1]
        assert len({n["worker"] for n in nodes}) == 2
        joined = sorted(at(n["joined_at"]) for n in nodes)
        # Both nodes were handed over together: neither held a worker waiting for the other.
        assert (joined[1] - joined[0]).total_seconds() < 3, nodes
        for n in nodes:
            spans.setdefault(n["worker"], []).append(
                (at(n["joined_at"]), at(n["finished_at"]), job_id)
            )
        assert sum("of 2" in line for line in lines_of(api, job_id)) == 2
    for worker, held in spans.items():
        held.sort()
        for (_, ended, _), (began, _, _) in zip(held, held[1:], strict=False):
            assert ended <= began, f"worker {worker} ran two jobs at once: {held}"
    # Nothing is held any more, and every job was admitted once.
    assert all(not w["reservations"] for w in api.get("/v1/workers").json()["items"])


def code_of(api: httpx.Client, as_token: str | None) -> dict[str, str]:
    """The scripts' code ids, uploaded by this owner (code runs only for its uploaders)."""
    headers = {"Authorization": f"Bearer {as_token}"} if as_token else {}
    ids = {}
    for script, body in (("show.py", SHOW), ("counter.py", COUNTER)):
        upload = api.post("/v1/code", files={"file": (script, io.BytesIO(body))}, headers=headers)
        assert upload.status_code in (200, 201), upload.text
        ids[script] = upload.json()["code_id"]
    return ids


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/v1/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
