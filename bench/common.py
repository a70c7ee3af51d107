"""What every benchmark shares: a result row, a stack of real processes, events-file timing."""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devstack.procs import SESSION_MARKER, free_port
from devstack.services import private_redis
from devstack.stack import Stack
from worker.launch import RunPaths

MARKER = uuid.uuid4().hex
# A job's `checkpoint` policy that saves none: the benchmarks time training, not saving.
NO_CHECKPOINTS: dict[str, Any] = {"every_epochs": None, "every_steps": None}


@dataclass
class Result:
    """One row of the table: the goal, what was measured against what, and whether it holds."""

    id: str
    what: str
    measured: str
    goal: str
    met: bool | None
    notes: str = ""

    def row(self) -> str:
        verdict = {True: "met", False: "**missed**", None: "reported"}[self.met]
        cells = [self.id, self.what, self.measured, self.goal, verdict, self.notes]
        return "| " + " | ".join(cells) + " |"


TABLE_HEADER = (
    "| id | what | measured | goal | verdict | notes |\n| --- | --- | --- | --- | --- | --- |"
)


@contextmanager
def running_stack(workers: int = 1, **env: str) -> Iterator[Stack]:
    """API + workers on SQLite and a private Redis, all stopped afterwards."""
    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-"))
    os.chmod(root, 0o711)  # a root worker's job users pass through it to the data dir
    with private_redis() as redis_server:
        stack = Stack(
            root=root,
            database_url=f"sqlite:///{root / 'data' / 'launchbay.db'}",
            redis_url=redis_server.url(0),
            marker=MARKER,
            # Benchmarks flood POST /v1/jobs on purpose: no per-owner submission limit.
            extra_env={"LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0", **env},
        )
        try:
            stack.start_api()
            for _ in range(workers):
                stack.start_worker()
            yield stack
        finally:
            stack.stop()


@contextmanager
def environ_set(values: Mapping[str, str]) -> Iterator[None]:
    """`os.environ` with `values` set (for the processes started meanwhile), as it was after."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def api_stack(database_url: str | None = None) -> Iterator[Stack]:
    """An API alone (no worker, no reaper) on a private Redis and its own data directory;
    `database_url` None: its own SQLite file."""
    root = Path(tempfile.mkdtemp(prefix="launchbay-bench-"))
    os.chmod(root, 0o711)
    with private_redis() as redis_server:
        stack = Stack(
            root=root,
            database_url=database_url or f"sqlite:///{root / 'data' / 'launchbay.db'}",
            redis_url=redis_server.url(0),
            marker=MARKER,
            extra_env={"LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0", "LAUNCHBAY_REAPER_ENABLED": "0"},
        )
        try:
            stack.start_api()
            yield stack
        finally:
            stack.stop()


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def steps_per_second(events: list[dict[str, Any]]) -> float:
    """Training speed between the first and the last metric line rank 0 wrote."""
    points = [(e["step"], e["ts"]) for e in events if e.get("type") == "metric" and "ts" in e]
    (s0, t0), (s1, t1) = points[0], points[-1]
    return (s1 - s0) / (t1 - t0)


def first_step_ts(events: list[dict[str, Any]]) -> float:
    return min(e["ts"] for e in events if e.get("type") == "metric")


def torchrun_env(events: Path, workdir: Path, config: dict[str, Any]) -> dict[str, str]:
    """What a recipe run outside Launchbay needs beside the user's environment."""
    return {
        "LAUNCHBAY_EVENTS_FILE": str(events),
        "LAUNCHBAY_CHECKPOINT_DIR": str(workdir / "checkpoints"),
        "LAUNCHBAY_CONFIG": json.dumps(config),
        "LAUNCHBAY_CHECKPOINT": json.dumps(NO_CHECKPOINTS),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }


def bare_command(
    module: str, config: dict[str, Any], workdir: Path, nproc: int = 2
) -> tuple[list[str], dict[str, str], Path]:
    """Plain torchrun running a recipe the way a user would: (argv, environment, events file)."""
    workdir.mkdir(parents=True, exist_ok=True)
    events = workdir / "events.jsonl"
    env = {**_base_env(), **torchrun_env(events, workdir, config)}
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{free_port()}",
        "-m",
        module,
    ]
    return argv, env, events


def bare_torchrun(
    module: str, config: dict[str, Any], workdir: Path, nproc: int = 2
) -> tuple[float, list[dict[str, Any]]]:
    """Run a recipe under plain torchrun; returns (start time, events)."""
    argv, env, events = bare_command(module, config, workdir, nproc)
    start = time.time()
    subprocess.run(argv, env=env, cwd=workdir, check=True, capture_output=True, timeout=900)
    return start, read_events(events)


def _base_env() -> dict[str, str]:
    import os

    return {**os.environ, SESSION_MARKER: MARKER}


def recipe_spec(name: str, recipe: str, config: Mapping[str, Any], nproc: int) -> dict[str, Any]:
    """The job spec of a built-in recipe that saves no checkpoints."""
    return {
        "name": name,
        "recipe": recipe,
        "nproc_per_node": nproc,
        "config": config,
        "checkpoint": NO_CHECKPOINTS,
    }


def submit_and_wait(
    http: httpx.Client,
    stack: Stack,
    spec: dict[str, Any],
    timeout: float = 600,
    poll_s: float = 0.2,
) -> tuple[float, dict[str, Any]]:
    start = time.time()
    response = http.post("/v1/jobs", json=spec)
    response.raise_for_status()
    job_id = response.json()["id"]
    job = stack.wait_for_state(http, job_id, {"succeeded"}, timeout=timeout, interval=poll_s)
    return start, job


def attempt_paths(stack: Stack, job_id: str, attempt: int = 1) -> RunPaths:
    """Where an attempt of a job the stack ran lives in its data dir."""
    return RunPaths.for_attempt(stack.data_dir, job_id, attempt)


def job_events(stack: Stack, job_id: str, attempt: int = 1) -> list[dict[str, Any]]:
    return read_events(attempt_paths(stack, job_id, attempt).events_file)


def median(values: list[float]) -> float:
    return statistics.median(values)


# --- helpers of P3-P6: percentiles, SSE parsing, wrk, uploaded code, file birth times ---


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between the closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"q={q} is not in 0..100")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class SseEvent:
    event: str
    data: str
    id: str | None


class SseParser:
    """Server-Sent Events from a stream of lines (without their line endings), as in the
    HTML spec: fields until a blank line; `data` lines joined by newlines; comments ignored."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> SseEvent | None:
        """The event this line completes, if it is the blank line that ends one."""
        if not line:
            if not self._data:
                self._event = ""
                return None
            done = SseEvent(self._event or "message", "\n".join(self._data), self._id)
            self._event, self._data = "", []
            return done
        if line.startswith(":"):
            return None
        field_name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field_name == "event":
            self._event = value
        elif field_name == "data":
            self._data.append(value)
        elif field_name == "id":
            self._id = value
        return None


@dataclass
class WrkResult:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: int  # connect/read/write errors and non-2xx/3xx answers
    timeouts: int  # requests that had no answer within wrk's --timeout

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def failed(self) -> bool:
        return self.errors > 0 or self.timeouts > 0 or self.requests == 0


# wrk's `done` hook: one line with exact numbers (its own summary rounds them).
WRK_REPORT_LUA = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_RESULT {\\"requests\\": %d, \\"duration_us\\": %d, \\"p50_us\\": %d, \\"p99_us\\": %d, "
    .. "\\"errors\\": %d, \\"timeouts\\": %d}\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status, e.timeout))
end
"""


def parse_wrk_output(output: str) -> WrkResult:
    """The WRK_RESULT line that WRK_REPORT_LUA prints."""
    for line in output.splitlines():
        if line.startswith("WRK_RESULT "):
            raw = json.loads(line.removeprefix("WRK_RESULT "))
            return WrkResult(
                requests=raw["requests"],
                seconds=raw["duration_us"] / 1e6,
                p50_ms=raw["p50_us"] / 1e3,
                p99_ms=raw["p99_us"] / 1e3,
                errors=raw["errors"],
                timeouts=raw["timeouts"],
            )
    raise RuntimeError(f"no WRK_RESULT line in wrk's output:\n{output}")


def ensure_wrk() -> str:
    """The path of `wrk`, installed from Debian when missing and we are root."""
    import os
    import shutil

    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() != 0:
        raise RuntimeError("wrk is not installed; run `apt-get install -y wrk` as root first")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "wrk"]):
        subprocess.run(argv, check=True, capture_output=True, env=env, timeout=300)
    found = shutil.which("wrk")
    if not found:
        raise RuntimeError("apt-get install wrk succeeded but wrk is not on PATH")
    return found


def run_wrk(
    url: str,
    *,
    seconds: float,
    connections: int,
    threads: int = 1,
    lua: str = "",
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> WrkResult:
    """Load `url` with wrk (closed loop, `connections` kept busy) for `seconds`."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua + WRK_REPORT_LUA)
    try:
        argv = [
            ensure_wrk(),
            f"-t{threads}",
            f"-c{connections}",
            f"-d{seconds:g}s",
            "--timeout",
            f"{timeout_s:g}s",
            *(arg for name, value in (headers or {}).items() for arg in ("-H", f"{name}: {value}")),
            "-s",
            script.name,
            url,
        ]
        done = subprocess.run(
            argv, check=True, capture_output=True, text=True, timeout=seconds + 60
        )
    finally:
        Path(script.name).unlink(missing_ok=True)
    return parse_wrk_output(done.stdout)


def upload_code(http: httpx.Client, filename: str, source: str) -> str:
    """POST /v1/code a one-file program; returns its code_id."""
    response = http.post("/v1/code", files={"file": (filename, source.encode(), "text/x-python")})
    response.raise_for_status()
    return str(response.json()["code_id"])


def wait_for_end(
    http: httpx.Client, stack: Stack, job_id: str, timeout: float = 300
) -> dict[str, Any]:
    """The finished job; fails with the logs unless it succeeded."""
    return stack.wait_for_state(http, job_id, {"succeeded"}, timeout=timeout, interval=0.1)


def birth_time(path: Path) -> float:
    """When `path` was created (statx birth time, ns precision), in Unix seconds.

    Python 3.11's os.stat has no birth time on Linux; GNU stat asks statx for it.
    """
    out = subprocess.run(
        ["stat", "-c", "%.9W", str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()
    value = float(out)
    if value <= 0:
        raise RuntimeError(f"the filesystem of {path} records no birth time")
    return value
