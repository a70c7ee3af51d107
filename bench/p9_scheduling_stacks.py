"""P9 (docs/scheduling.md) on real stacks: jobs reaching running per second on real workers
(S3), and fair share between two owners on two one-slot workers (S4). What the dispatcher
adds to one job's start beside the RQ hand-over without it (S2) is `bench.p9_dispatch_path`.
"""

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.common import MARKER
from devstack.stack import Stack

NOOP = b"print('ok')\n"


@contextmanager
def stack_of(root: Path, redis_url: str, workers: int, **env: str) -> Iterator[Stack]:
    root.mkdir(parents=True, exist_ok=True)
    stack = Stack(
        root=root,
        database_url=f"sqlite:///{root / 'data' / 'launchbay.db'}",
        redis_url=redis_url,
        marker=MARKER,
        extra_env={"LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0", **env},
    )
    try:
        stack.start_api()
        for _ in range(workers):
            stack.start_worker(args=["--slots", "1"])
        yield stack
    finally:
        stack.stop()


def noop_spec(http: httpx.Client, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    upload = http.post("/v1/code", files={"file": ("noop.py", io.BytesIO(NOOP))}, headers=headers)
    upload.raise_for_status()
    code = {"code_id": upload.json()["code_id"], "entrypoint": "noop.py"}
    return {"name": "noop", "code": code, "launcher": "python", "nproc_per_node": 1}


def at(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def wait_for_workers(http: httpx.Client, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(http.get("/v1/workers").json()["items"]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} workers came up")
        time.sleep(0.2)


@dataclass(frozen=True)
class Throughput:
    per_s: float  # jobs reaching `running` per second
    # CPU seconds a job, by process: "api", "workers", "fork servers" (with their launchers
    # and ranks, reaped) and "machine" (all of it).
    cpu_per_job: dict[str, float]


def real_throughput(
    root: Path, redis_url: str, workers: int = 4, jobs: int = 40, *, warm: bool = False
) -> Throughput:
    """Jobs reaching `running` per second, `jobs` no-op jobs posted at once onto `workers`
    one-slot workers: a `python` launcher (cold), or with `warm`, the default launcher on
    workers whose fork servers are up (two jobs each first); and the CPU each took a job."""
    with stack_of(root, redis_url, workers) as stack, stack.client() as http:
        wait_for_workers(http, workers)
        spec = noop_spec(http)
        if warm:
            del spec["launcher"]
            first = [http.post("/v1/jobs", json=spec).json()["id"] for _ in range(2 * workers)]
            for job_id in first:
                stack.wait_for_state(http, job_id, {"succeeded"}, timeout=600)
        ids = []
        before = cpu_by_role(stack)
        began = time.time()
        for _ in range(jobs):
            response = http.post("/v1/jobs", json=spec)
            response.raise_for_status()
            ids.append(response.json()["id"])
        for job_id in ids:
            stack.wait_for_state(http, job_id, {"succeeded"}, timeout=600)
        after = cpu_by_role(stack)
        running = [running_at(http, job_id) for job_id in ids]
    used = {role: (after[role] - before.get(role, 0.0)) / jobs for role in after}
    return Throughput(jobs / (max(running) - began), used)


def cpu_by_role(stack: Stack) -> dict[str, float]:
    """CPU seconds so far (user and system, reaped children included) of the stack's API, its
    workers and their fork servers, and of the whole machine."""

    def spent(process: psutil.Process) -> float:
        try:
            t = process.cpu_times()
        except psutil.Error:
            return 0.0
        return t.user + t.system + t.children_user + t.children_system

    assert stack.api is not None
    workers = [psutil.Process(w.pid) for w in stack.workers if w.poll() is None]
    servers = [
        child
        for worker in workers
        for child in worker.children()
        if any("warm_server.py" in part for part in child.cmdline())
    ]
    machine = psutil.cpu_times()
    return {
        "api": spent(psutil.Process(stack.api.pid)),
        "workers": sum(spent(w) for w in workers),
        "fork servers": sum(spent(s) for s in servers),
        "machine": sum(machine) - machine.idle - machine.iowait,
    }


def running_at(http: httpx.Client, job_id: str) -> float:
    """When the job reached `running` (its state event's time)."""
    items = http.get(f"/v1/jobs/{job_id}/timeline").json()["items"]
    return min(
        float(e["data"]["ts"])
        for e in items
        if e["event"] == "state" and e["data"].get("state") == "running"
    )


def fair_share(root: Path, redis_url: str) -> dict[str, float]:
    with stack_of(root, redis_url, 2) as stack, stack.client() as http:
        wait_for_workers(http, 2)
        tokens = {}
        for owner in ("a", "b"):
            made = http.post("/v1/tokens", json={"name": owner})
            made.raise_for_status()
            tokens[owner] = made.json()["token"]
        specs = {o: noop_spec(http, t) for o, t in tokens.items()}
        ids: dict[str, list[str]] = {"a": [], "b": []}
        for owner, count in (("a", 40), ("b", 10)):
            headers = {"Authorization": f"Bearer {tokens[owner]}"}
            for _ in range(count):
                response = http.post("/v1/jobs", json=specs[owner], headers=headers)
                response.raise_for_status()
                ids[owner].append(response.json()["id"])
        b_submitted = time.time()
        jobs = {
            o: [stack.wait_for_state(http, j, {"succeeded"}, timeout=900) for j in js]
            for o, js in ids.items()
        }
    a_starts = sorted(at(j["started_at"]) for j in jobs["a"])
    b_starts = sorted(at(j["started_at"]) for j in jobs["b"])
    window = (b_submitted, max(at(j["finished_at"]) for j in jobs["b"]))

    def held(owner: str) -> float:
        total = 0.0
        for job in jobs[owner]:
            start, end = (
                max(at(job["started_at"]), window[0]),
                min(at(job["finished_at"]), window[1]),
            )
            total += max(0.0, end - start)
        return total

    a_held, b_held = held("a"), held("b")
    share_a, share_b = a_held / (a_held + b_held), b_held / (a_held + b_held)
    # Jain's index of the shares over equal weights: 1 is perfectly fair, 1/2 the worst.
    x = (share_a / 0.5, share_b / 0.5)
    jain = sum(x) ** 2 / (len(x) * sum(v * v for v in x))
    return {
        "b_first_s": b_starts[0] - a_starts[0],
        "a_11th_s": a_starts[10] - a_starts[0],
        "b_before_a11": float(b_starts[0] < a_starts[10]),
        "share_a": share_a,
        "share_b": share_b,
        "jain": jain,
        "window_s": window[1] - window[0],
    }
