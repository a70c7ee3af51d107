"""Faults injected into real processes, the job driven and checked over HTTP: a worker SIGKILLed
mid-job (R1), a rank SIGKILLed (R2), a cancel (R3), Redis and the API restarted (R4), a job
that hangs or runs too long (R5). Each test prints what it measured (`pytest -s`).

One stack (API, two workers, its own Redis) serves R1, R2, R3 and R5, with fast heartbeats and
a reaper that takes a job for lost after LOST_AFTER_S; R4 restarts Redis and the API, so it has
a stack of its own. The second worker serves only the queue WAITS: R5's jobs that wait for their
hang or time limit are submitted to it when the module starts, so that their waits pass while
the other tests' jobs run on the first.
"""

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.conftest import make_stack
from tests.e2e.conftest import stack_of_its_own
from tests.support.procs import job_processes, wait_until
from tests.support.services import RedisServer, private_redis
from tests.support.stack import LAUNCHBAY, Stack

LOST_AFTER_S = 6
FAST_FAULTS = {
    "LAUNCHBAY_HEARTBEAT_INTERVAL_S": "1",
    "LAUNCHBAY_REAPER_INTERVAL_S": "1",
    "LAUNCHBAY_REAPER_LOST_AFTER_S": str(LOST_AFTER_S),
}
GRACE_S = 3  # LAUNCHBAY_CANCEL_GRACE_S of every Stack
WAITS = "waits"
# Long enough for the ranks to start and report on a loaded 2-core machine: ~4-6 s on most
# days, ~8 s on a slow one (10 s left a job with no metric line).
TIMEOUT_LIMIT_S = 20


def synthetic(name: str, **fields: Any) -> dict[str, Any]:
    config = {"log_every_steps": 1, **fields.pop("config", {})}
    return {"name": name, "recipe": "synthetic", "nproc_per_node": 2, "config": config, **fields}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workers = [(), (WAITS,)]
    with stack_of_its_own(tmp_path_factory.mktemp("faults"), workers, **FAST_FAULTS) as running:
        yield running


@pytest.fixture(scope="module", autouse=True)
def waiting_jobs(stack: Stack) -> dict[str, str]:
    """R5's jobs that wait for a limit, submitted to the WAITS worker as the module starts: the
    one that makes no progress, then the one that runs too long. Their tests check them."""
    specs = {
        "hangs": synthetic("hangs", hang_timeout_s=3, config={"sleep_per_step_s": 60}),
        "too-long": synthetic(
            "too-long",
            timeout_s=TIMEOUT_LIMIT_S,
            config={"epochs": 100, "sleep_per_step_s": 0.2},
        ),
    }
    with stack.client() as http:
        return {name: submit(http, {**spec, "queue": WAITS}) for name, spec in specs.items()}


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


def environ_of(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def attempt_processes(job_id: str, attempt: int) -> list[psutil.Process]:
    procs = job_processes(job_id)
    return [p for p in procs if environ_of(p).get("LAUNCHBAY_ATTEMPT") == str(attempt)]


def rank_processes(job_id: str) -> dict[int, psutil.Process]:
    """The ranks (rank_main.py under torchrun) of the job, by rank."""
    ranks = {}
    for proc in job_processes(job_id):
        env = environ_of(proc)
        try:
            if "RANK" in env and any(a.endswith("rank_main.py") for a in proc.cmdline()):
                ranks[int(env["RANK"])] = proc
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return ranks


def groups_of(procs: list[psutil.Process]) -> set[int]:
    groups = set()
    for proc in procs:
        try:
            groups |= {os.getpgid(proc.pid), os.getsid(proc.pid)}
        except ProcessLookupError:
            continue
    return groups - {os.getpgid(0), os.getsid(0)}


def alive_in(pids: set[int], groups: set[int]) -> list[int]:
    """PIDs alive among `pids`, or in one of the process groups or sessions `groups`."""
    alive = []
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        pid = proc.info["pid"]
        try:
            if pid in pids or os.getpgid(pid) in groups or os.getsid(pid) in groups:
                alive.append(pid)
        except ProcessLookupError:
            continue
    return alive


def metric_points(http: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    body = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()
    items: list[dict[str, Any]] = body["items"]
    return items


def reported_points(stack: Stack, job_id: str, attempt: int = 1) -> int:
    """How many metric points rank 0 wrote to the attempt's events file."""
    events = stack.data_dir / "runs" / job_id / f"attempt-{attempt}" / "events.jsonl"
    lines = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    return sum(len(line["metrics"]) for line in lines if line["type"] == "metric")


def submit(http: httpx.Client, spec: dict[str, Any]) -> str:
    response = http.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    job_id: str = response.json()["id"]
    return job_id


def seconds(job: dict[str, Any], start: str, end: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(job[end]) - datetime.fromisoformat(job[start])).total_seconds()


# R1


def test_a_killed_worker_s_job_is_retried_and_resumes_from_its_checkpoint(
    stack: Stack, http: httpx.Client
) -> None:
    spec = synthetic("resumed", max_retries=1, config={"epochs": 4, "sleep_per_step_s": 0.25})
    job_id = submit(http, spec)
    stack.wait_for_state(http, job_id, {"running"})
    assert wait_until(lambda: http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"], 60)
    # While it runs, the time it has left at its recent rate (a step takes 0.25 s and more).
    running = http.get(f"/v1/jobs/{job_id}").json()
    progress = running["progress"]
    left = progress["total_steps"] - progress["step"]
    assert running["state"] == "running" and left > 0, running
    assert 0.2 * left - 3 <= progress["eta_s"] <= 2.0 * left + 3, progress
    first = attempt_processes(job_id, 1)
    first_pids = {p.pid for p in first}
    first_groups = groups_of(first)
    assert len(first) >= 3  # torchrun and two ranks

    # SIGKILL the worker: every process of its session, which is the worker alone (its fork
    # servers and its watchdog have sessions of their own).
    records = http.get("/v1/workers").json()["items"]
    [record] = [w for w in records if (w["current_job"] or {}).get("id") == job_id]
    [worker] = [w for w in stack.workers if w.pid == record["pid"]]
    worker_procs = [p for p in psutil.process_iter() if _sid(p.pid) == worker.pid]
    for proc in worker_procs:
        proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    worker.wait(10)
    assert len(worker_procs) == 1, worker_procs

    # The kernel takes the rest down: the launcher gets SIGTERM, then the ranks SIGKILL.
    assert wait_until(lambda: not alive_in(first_pids, first_groups), timeout=15, interval=0.1)
    orphans_gone_s = time.monotonic() - killed_at
    job = stack.wait_for_state(http, job_id, {"queued"}, timeout=30, interval=0.2)
    requeued_s = time.monotonic() - killed_at
    assert job["attempt"] == 2 and job["exit_reason"] is None and job["worker"] is None
    assert "worker_lost" in job["message"]
    checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    resume_step = max(c["step"] for c in checkpoints if c["attempt"] == 1)

    stack.start_worker()
    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
    assert (job["attempt"], job["exit_reason"]) == (2, "completed")
    assert job["progress"]["eta_s"] is None  # not running

    points = [p for p in metric_points(http, job_id) if p["name"] == "loss"]
    first_steps = [p["step"] for p in points if p["attempt"] == 1]
    second_steps = [p["step"] for p in points if p["attempt"] == 2]
    assert min(second_steps) == resume_step + 1, (resume_step, second_steps)
    assert second_steps == sorted(second_steps)
    assert second_steps[-1] == job["progress"]["total_steps"]
    logs = http.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0, "limit": 10_000}).json()
    assert any(line["line"].startswith(f"resumed at step {resume_step}:") for line in logs["items"])
    assert not alive_in(first_pids, first_groups) and not attempt_processes(job_id, 1)
    assert not job_processes(job_id)
    print(
        f"\nR1: attempt-1 processes gone {orphans_gone_s:.1f} s after the kill; "
        f"job queued again (attempt 2) after {requeued_s:.1f} s; resumed after step "
        f"{resume_step} (attempt 1 reached step {max(first_steps)}, attempt 2 ran steps "
        f"{min(second_steps)}..{max(second_steps)}); 0 processes of attempt 1 left"
    )


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None


# R2


@pytest.mark.parametrize("max_restarts", [1, 0], ids=["restarted", "failed"])
def test_a_killed_rank_takes_its_attempt_down(
    stack: Stack, http: httpx.Client, max_restarts: int
) -> None:
    spec = synthetic(
        f"rank-killed-{max_restarts}",
        max_restarts=max_restarts,
        config={"epochs": 2, "sleep_per_step_s": 0.2},
    )
    job_id = submit(http, spec)
    stack.wait_for_state(http, job_id, {"running"})
    assert wait_until(lambda: metric_points(http, job_id), timeout=60)
    ranks = rank_processes(job_id)
    assert sorted(ranks) == [0, 1]
    ranks[1].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    pids = {p.pid for p in ranks.values()}
    assert wait_until(lambda: not alive_in(pids, set()), timeout=5, interval=0.05)
    ranks_gone_s = time.monotonic() - killed_at

    if max_restarts:
        job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
        logs = http.get(f"/v1/jobs/{job_id}/logs", params={"limit": 10_000}).json()["items"]
        assert any("(elastic restart 1)" in line["line"] for line in logs)
        assert job["attempt"] == 1
    else:
        job = stack.wait_for_state(http, job_id, {"failed"}, timeout=60)
        assert job["exit_reason"] == "user_error", job
        assert job["message"].startswith("rank 1 failed (exit code -9, SIGKILL)"), job["message"]
    assert wait_until(lambda: not job_processes(job_id), timeout=5)
    print(
        f"\nR2 (max_restarts={max_restarts}): both ranks gone {ranks_gone_s:.2f} s after "
        f"SIGKILL of rank 1; job {job['state']} ({job['exit_reason']})"
    )


# R3


def test_cancel_leaves_no_process_behind(stack: Stack, http: httpx.Client) -> None:
    job_id = submit(http, synthetic("cancelled", config={"epochs": 50, "sleep_per_step_s": 0.5}))
    stack.wait_for_state(http, job_id, {"running"})
    assert wait_until(lambda: len(rank_processes(job_id)) == 2, timeout=60)
    procs = job_processes(job_id)
    pids, groups = {p.pid for p in procs}, groups_of(procs)

    workers = http.get("/v1/workers").json()["items"]
    [busy] = [w for w in workers if (w["current_job"] or {}).get("id") == job_id]
    slots = [f"cpu:{i}" for i in range(len(os.sched_getaffinity(0)))]  # a slot per usable core
    assert (busy["state"], busy["queues"], busy["devices"]) == ("busy", ["default"], slots)

    asked = time.monotonic()
    response = http.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202 and response.json()["state"] == "cancelling"
    leftovers_at_cancelled: list[int] = []

    def cancelled() -> bool:
        if http.get(f"/v1/jobs/{job_id}").json()["state"] != "cancelled":
            return False
        leftovers_at_cancelled.extend(alive_in(pids, groups))
        return True

    assert wait_until(cancelled, timeout=GRACE_S + 10, interval=0.05)
    took = time.monotonic() - asked
    assert leftovers_at_cancelled == [], "cancelled while processes of the job still ran"
    assert took <= GRACE_S + 2, took
    assert not alive_in(pids, groups) and not job_processes(job_id)
    job = http.get(f"/v1/jobs/{job_id}").json()
    assert job["exit_reason"] == "cancelled"
    print(
        f"\nR3: cancelled {took:.2f} s after POST cancel (grace {GRACE_S} s); "
        f"{len(pids)} processes in {len(groups)} groups/sessions, 0 left"
    )


# The goodput ledger against the program's own clock

SAVES_AND_DIES = """\
import json, os, signal, time

import torch

from jobs import runtime as lb

STEPS, EVERY, KILL_AFTER, STEP_S, SAVE_S = 12, 4, 11, 0.4, 1.0


class SlowState:
    \"\"\"Saved with the checkpoint: its state_dict takes SAVE_S, inside the save.\"\"\"

    def state_dict(self):
        time.sleep(SAVE_S)
        return {}


with lb.distributed() as ctx:
    model = lb.prepare_model(torch.nn.Linear(2, 1), ctx)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step, saves = 0, []
    state = lb.load_resume_state()
    if state is not None:
        lb.restore(state, model, optimizer)
        step = state["step"]
    attempt = int(os.environ["LAUNCHBAY_ATTEMPT"])
    while step < STEPS:
        time.sleep(STEP_S)
        loss = model(torch.ones(4, 2)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        lb.report(step, 0, loss=lb.reduce_mean(loss))
        if step % EVERY == 0:
            began = time.time()
            lb.save_checkpoint(model, optimizer, SlowState(), step=step, epoch=0)
            saves.append([began, time.time()])
        if attempt == 1 and step == KILL_AFTER and ctx.rank == 0:
            clock = {"attempt": 1, "saves": saves, "killed_at": time.time()}
            print("clock " + json.dumps(clock), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    if ctx.rank == 0:
        print("clock " + json.dumps({"attempt": attempt, "saves": saves}), flush=True)
"""


def near(value: float, expected: float) -> bool:
    """Within ±5 % or ±0.5 s of the program's own clock."""
    return abs(value - expected) <= max(0.5, 0.05 * expected)


def test_the_goodput_ledger_of_a_killed_and_resumed_job_follows_its_own_clock(
    stack: Stack, http: httpx.Client
) -> None:
    """A program that sleeps 1 s inside each save (every 4 steps) and kills its rank 0 after
    step 11: its retry resumes at step 8. `checkpoint_stall` is its saves as it timed them,
    `lost_work` the time from the end of its last save to its death."""
    files = {"file": ("saves_and_dies.py", SAVES_AND_DIES.encode(), "text/x-python")}
    code_id = http.post("/v1/code", files=files).json()["code_id"]
    spec = {
        "name": "saves-and-dies",
        "code": {"code_id": code_id, "entrypoint": "saves_and_dies.py"},
        "nproc_per_node": 2,
        "device": "cpu",
        "max_retries": 1,
    }
    job_id = submit(http, spec)
    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
    assert job["attempt"] == 2, job
    lines = http.get(f"/v1/jobs/{job_id}/logs", params={"rank": 0, "limit": 10_000}).json()
    clocks = [json.loads(i["line"][6:]) for i in lines["items"] if i["line"].startswith("clock ")]
    first, second = sorted(clocks, key=lambda c: c["attempt"])
    saved = [end - began for began, end in first["saves"] + second["saves"]]
    lost = first["killed_at"] - first["saves"][-1][1]

    ledger = http.get(f"/v1/jobs/{job_id}/goodput").json()
    parts = {part["name"]: part["seconds"] for part in ledger["parts"]}
    assert sum(parts.values()) == ledger["wall_s"] and ledger["final"], ledger
    assert len(saved) == 3 and near(parts["checkpoint_stall"], sum(saved)), (parts, saved)
    assert near(parts["lost_work"], lost), (parts, lost)
    assert parts["training"] > 0 and parts["retry_gap"] > 0 and parts["launch"] > 0
    held = [p for p in ledger["parts"] if p["name"] not in ("queued", "retry_gap")]
    assert all(p["device_seconds"] == 2 * p["seconds"] for p in held)
    print(
        f"\ngoodput: checkpoint_stall {parts['checkpoint_stall']:.2f} s (saves timed "
        f"{sum(saved):.2f} s), lost_work {parts['lost_work']:.2f} s (the program's "
        f"{lost:.2f} s), training {parts['training']:.2f} s, goodput {ledger['goodput']:.3f}"
    )


# R5


def test_a_job_that_makes_no_progress_is_a_hang(
    stack: Stack, http: httpx.Client, waiting_jobs: dict[str, str]
) -> None:
    job_id = waiting_jobs["hangs"]
    job = stack.wait_for_state(http, job_id, {"failed"}, timeout=60)
    assert job["exit_reason"] == "hang", job
    assert job["message"] == "stopped: no new event from rank 0 for hang_timeout_s=3 s"
    ran_s = seconds(job, "started_at", "finished_at")
    assert 3 <= ran_s <= 3 + GRACE_S + 8, (
        ran_s
    )  # the stop, not a minute later (a loaded CI adds seconds)
    assert wait_until(lambda: not job_processes(job_id), timeout=5)
    # Its goodput ledger: from what the watchdog last saw (its start) to its stop, a hang.
    ledger = http.get(f"/v1/jobs/{job_id}/goodput").json()
    parts = {part["name"]: part["seconds"] for part in ledger["parts"]}
    assert sum(parts.values()) == ledger["wall_s"] and ledger["final"], ledger
    assert near(parts["hang"], 3.0) and parts["training"] == 0.0, parts
    print(f"\nR5: hang_timeout_s=3: failed (hang) {ran_s:.1f} s after it started")


def test_a_job_that_runs_too_long_times_out(
    stack: Stack, http: httpx.Client, waiting_jobs: dict[str, str]
) -> None:
    limit = TIMEOUT_LIMIT_S
    job_id = waiting_jobs["too-long"]
    # It waits behind the hang on the WAITS worker.
    job = stack.wait_for_state(http, job_id, {"failed"}, timeout=90 + limit)
    assert job["exit_reason"] == "timeout", job
    assert job["message"] == f"stopped after timeout_s={limit} s"
    ran_s = seconds(job, "started_at", "finished_at")
    assert limit <= ran_s <= limit + GRACE_S + 3, ran_s
    assert metric_points(http, job_id), "the metrics until the stop were kept"
    assert wait_until(lambda: not job_processes(job_id), timeout=5)
    print(f"\nR5: timeout_s={limit}: failed (timeout) {ran_s:.1f} s after it started")


# R4


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    with private_redis() as server:
        yield server


def test_redis_and_api_restarts_lose_nothing(
    tmp_path: Path, sqlite_url: str, own_redis: RedisServer
) -> None:
    stack = make_stack(tmp_path / "stack", sqlite_url, own_redis.url())
    try:
        stack.start_api()
        worker = stack.start_worker()
        spec = synthetic("survivor", config={"epochs": 8, "sleep_per_step_s": 0.3})
        with stack.client() as http:
            job_id = submit(http, spec)
            stack.wait_for_state(http, job_id, {"running"})
            assert wait_until(lambda: metric_points(http, job_id), timeout=60)
            own_redis.stop()  # Redis restarts empty: RQ's job, registries and keys are gone
            time.sleep(1)
            own_redis.start()
            # The API's Redis client reconnects by itself.
            assert wait_until(lambda: http.get("/v1/ready").status_code == 200, timeout=15)
            restarted_redis_at = len(metric_points(http, job_id))
            assert http.get(f"/v1/jobs/{job_id}").json()["state"] == "running"
        stack.stop_api()
        stack.start_api()
        with stack.client() as http:
            job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=120)
            assert (job["attempt"], job["exit_reason"]) == (1, "completed")
            points = metric_points(http, job_id)
            assert len(points) == reported_points(stack, job_id) > restarted_redis_at
            assert [p["seq"] for p in points] == sorted({p["seq"] for p in points})
            states = [e["data"]["state"] for e in _events(http, job_id) if e["event"] == "state"]
            assert states == ["queued", "starting", "running", "succeeded"]
            assert http.get("/v1/ready").status_code == 200

            # The same worker process is still at work, on the emptied Redis.
            second = submit(http, synthetic("after-restart", config={"epochs": 1}))
            stack.wait_for_state(http, second, {"succeeded"}, timeout=90)
            assert worker.poll() is None
        print(
            f"\nR4: {len(points)} metric points of {reported_points(stack, job_id)} reported "
            f"({restarted_redis_at} before the Redis restart); the worker survived it and "
            "ran the next job"
        )
    finally:
        stack.stop()


# R5: hang forensics

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
HANG_TIMEOUT_S = 25


def _log_lines(http: httpx.Client, job_id: str) -> list[str]:
    return [item["line"] for item in http.get(f"/v1/jobs/{job_id}/logs").json()["items"]]


def test_a_deadlocked_collective_is_a_hang_whose_stacks_name_the_missing_rank(
    stack: Stack, http: httpx.Client
) -> None:
    """R5, hang forensics: rank 1 skips the all_reduce rank 0 waits in. `launchbay stacks`
    prints both ranks' stacks while the job runs; the hang watchdog stops it and its recorded
    stacks show rank 0 in the collective and rank 1 elsewhere, behind."""
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
        lambda: {"rank 0 ready", "rank 1 ready"} <= set(_log_lines(http, job_id)), timeout=60
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


def _events(http: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    from tests.e2e.test_pipeline import follow_events

    return follow_events(http, job_id)
