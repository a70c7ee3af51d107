"""What every check of a GPU check shares: the target (CUDA or CPU), a private stack (SQLite,
its own Redis, the API and one worker given the GPUs) and the calls a check makes on it."""

import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.p7_gpu import Target, probe_cuda
from devstack.procs import marked_processes
from devstack.services import private_redis
from devstack.stack import Stack
from jobs.states import JobState

PROGRAMS = Path(__file__).parent / "programs"
REPO = Path(__file__).resolve().parents[2]


def find_target(cpu: bool) -> Target:
    """Every CUDA device here (none: an error saying to use --cpu), or two CPU ranks."""
    if cpu:
        return Target("cpu", "gloo", 2, None)
    count, name, uuids = probe_cuda()
    if count == 0:
        raise SystemExit(
            "gpu-check: torch sees no CUDA device here (run with --cpu on a machine without one)"
        )
    return Target("cuda", "nccl", count, name, uuids)


def interpreter_problem() -> str | None:
    """Why the job users of a root worker could not run this interpreter, its packages or
    Launchbay's code (the check every root worker makes at start, `worker.reach`), or None."""
    from worker.reach import installation_problem

    return installation_problem()


def nvidia_smi(*query: str) -> list[list[str]]:
    """Rows of `nvidia-smi --query-...=... --format=csv,noheader,nounits` (no nvidia-smi: [])."""
    if shutil.which("nvidia-smi") is None:
        return []
    done = subprocess.run(
        ["nvidia-smi", *query, "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        return []
    return [[c.strip() for c in line.split(",")] for line in done.stdout.splitlines() if line]


def describe_machine(target: Target) -> str:
    """One line: the GPUs and driver, torch and its CUDA, Python, cores, host."""
    torch_line = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()
    version, _, cuda = torch_line.partition(" ")
    gpus = nvidia_smi("--query-gpu=name,driver_version,memory.total")
    if target.device == "cuda" and gpus:
        name, driver, memory = gpus[0]
        where = f"{len(gpus)} × {name} ({int(memory) // 1024} GiB), driver {driver}"
    else:
        where = "no GPU used (--cpu: gloo on 2 CPU ranks)"
    return (
        f"{where}; torch {version} (CUDA {cuda}); Python {platform.python_version()}; "
        f"{os.cpu_count()} CPU cores; host {platform.node()}"
    )


@dataclass
class Session:
    """The stack of a GPU check and its target; `deadline` is when checks stop starting."""

    stack: Stack
    http: httpx.Client
    target: Target
    quick: bool
    deadline: float
    redis_url: str
    _code_ids: dict[str, str] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.target.device == "cuda"

    def time_left(self) -> float:
        return self.deadline - time.monotonic()

    def upload(self, program: str) -> str:
        """The code id of one of PROGRAMS, uploaded once."""
        if program not in self._code_ids:
            source = (PROGRAMS / program).read_bytes()
            response = self.http.post(
                "/v1/code", files={"file": (program, source, "text/x-python")}
            )
            response.raise_for_status()
            self._code_ids[program] = response.json()["code_id"]
        return self._code_ids[program]

    def program_spec(self, name: str, program: str, **more: Any) -> dict[str, Any]:
        """A job running one of PROGRAMS on the target's device, one rank per GPU (CPU: 2)."""
        spec: dict[str, Any] = {
            "name": name,
            "code": {"code_id": self.upload(program), "entrypoint": program},
            "nproc_per_node": self.target.nproc,
            "device": self.target.device,
            "backend": self.target.backend,
            "checkpoint": {"every_epochs": None, "every_steps": None},
            "timeout_s": 300,
            "tags": {"gpu-check": name},
        }
        return {**spec, **more}

    def submit(self, spec: dict[str, Any]) -> str:
        response = self.http.post("/v1/jobs", json=spec)
        if response.status_code != 201:
            raise RuntimeError(f"POST /v1/jobs answered {response.status_code}: {response.text}")
        return str(response.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.http.get(f"/v1/jobs/{job_id}").json())

    def wait_until(self, job_id: str, done: set[str], timeout_s: float) -> dict[str, Any]:
        """The job once its state is in `done` or terminal, or as it is after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job["state"] in done or JobState(job["state"]).is_terminal():
                return job
            if time.monotonic() > deadline:
                return job
            time.sleep(0.1)

    def run(self, spec: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
        """Submit and follow to the end (or `timeout_s`): the job as it ended."""
        return self.wait_until(self.submit(spec), set(), timeout_s)

    def log_lines(self, job_id: str, rank: int | None = None) -> list[str]:
        params: dict[str, Any] = {"limit": 1000}
        if rank is not None:
            params["rank"] = rank
        items = self.http.get(f"/v1/jobs/{job_id}/logs", params=params).json()["items"]
        return [f"[rank {item['rank']}] {item['line']}" for item in items]

    def metrics(self, job_id: str) -> list[dict[str, Any]]:
        return list(self.http.get(f"/v1/jobs/{job_id}/metrics").json()["items"])

    def outcome(self, job: dict[str, Any]) -> str:
        return f"{job['state']} ({job.get('exit_reason')}): {job.get('message') or ''}".strip()


@contextmanager
def running_session(
    target: Target, quick: bool, budget_s: float, marker: str, logs: Path
) -> Iterator[Session]:
    """A private stack on SQLite and a Redis of its own, with one worker owning every GPU (CPU:
    2 slots); everything it started is stopped on leaving, and its logs copied to `logs`."""
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="launchbay-gpu-check-"))
    os.chmod(root, 0o711)  # a root worker's job users pass through it to the data dir
    try:
        with private_redis() as redis:
            stack = Stack(
                root=root,
                database_url=f"sqlite:///{root / 'data' / 'launchbay.db'}",
                redis_url=redis.url(0),
                marker=marker,
                # Every job's GPUs sampled each second: the gpu_sampler check reads them back.
                extra_env={
                    "LAUNCHBAY_SUBMISSIONS_PER_MINUTE": "0",
                    "LAUNCHBAY_GPU_SAMPLE_INTERVAL_S": "1",
                },
            )
            try:
                stack.start_api()
                stack.start_worker(args=[] if target.device == "cuda" else ["--slots", "2"])
                with stack.client() as http:
                    wait_for_worker(stack, http)
                    yield Session(stack, http, target, quick, started + budget_s, redis.url(0))
            finally:
                stack.stop()
                logs.mkdir(parents=True, exist_ok=True)
                for log in root.glob("*.log"):
                    shutil.copy(log, logs / log.name)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def wait_for_worker(stack: Stack, http: httpx.Client, timeout_s: float = 180) -> None:
    """Until the worker has registered its devices (its CUDA probe takes seconds on a GPU)."""
    deadline = time.monotonic() + timeout_s
    while not http.get("/v1/workers").json().get("items"):
        if time.monotonic() > deadline or any(w.poll() is not None for w in stack.workers):
            raise RuntimeError(f"the worker did not register:\n{stack.worker_logs()}")
        time.sleep(0.2)


def leftover_processes(marker: str) -> list[str]:
    """What is still running of this check's processes (their command lines)."""
    found = []
    for proc in marked_processes(marker):
        try:
            found.append(f"{proc.pid}: {' '.join(proc.cmdline())[:200]}")
        except Exception:  # noqa: BLE001 - gone while we looked
            continue
    return found
