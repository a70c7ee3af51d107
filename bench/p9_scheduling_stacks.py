"""P9 (docs/scheduling.md) on real stacks: POST → launcher start under the dispatcher and
under FIFO (S2), jobs started per second by real workers (S3), and fair share between two
owners on two one-slot workers (S4).
"""

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import MARKER, attempt_paths, birth_time
from devstack.stack import Stack
from jobs.states import JobState

NOOP = b"print('ok')\n"


DISPATCHER = {"LAUNCHBAY_SCHEDULER": "dispatcher", "LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0"}


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


def launch_delay(stack: Stack, http: httpx.Client, spec: dict[str, Any]) -> float:
    before = time.time()
    response = http.post("/v1/jobs", json=spec)
    response.raise_for_status()
    job_id = response.json()["id"]
    stack.wait_for_state(http, job_id, {JobState.SUCCEEDED}, timeout=120, interval=0.05)
    launcher_log = attempt_paths(stack, job_id).launcher_log
    return birth_time(launcher_log) - before


def launch_delays(root: Path, redis_url: str, rounds: int = 11) -> tuple[list[float], list[float]]:
    fifo_root, dispatch_root = root / "fifo", root / "dispatch"
    fifo_redis = redis_url.rsplit("/", 1)[0] + "/1"
    fifo: list[float] = []
    dispatched: list[float] = []
    with (
        stack_of(fifo_root, fifo_redis, 1) as plain,
        stack_of(dispatch_root, redis_url, 1, **DISPATCHER) as scheduled,
        plain.client() as plain_http,
        scheduled.client() as scheduled_http,
    ):
        for http in (plain_http, scheduled_http):
            wait_for_workers(http, 1)
        plain_spec, scheduled_spec = noop_spec(plain_http), noop_spec(scheduled_http)
        for _ in range(rounds):
            fifo.append(launch_delay(plain, plain_http, plain_spec))
            time.sleep(0.3)
            dispatched.append(launch_delay(scheduled, scheduled_http, scheduled_spec))
            time.sleep(0.3)
    return fifo[1:], dispatched[1:]


def wait_for_workers(http: httpx.Client, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(http.get("/v1/workers").json()["items"]) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} workers came up")
        time.sleep(0.2)


def real_throughput(root: Path, redis_url: str, workers: int = 4, jobs: int = 40) -> float:
    with stack_of(root, redis_url, workers, **DISPATCHER) as stack, stack.client() as http:
        wait_for_workers(http, workers)
        spec = noop_spec(http)
        ids = []
        began = time.time()
        for _ in range(jobs):
            response = http.post("/v1/jobs", json=spec)
            response.raise_for_status()
            ids.append(response.json()["id"])
        ended = [stack.wait_for_state(http, j, {"succeeded"}, timeout=600) for j in ids]
        last_start = max(at(j["started_at"]) for j in ended)
    return jobs / (last_start - began)


def fair_share(root: Path, redis_url: str) -> dict[str, float]:
    with stack_of(root, redis_url, 2, **DISPATCHER) as stack, stack.client() as http:
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
