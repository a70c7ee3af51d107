"""A Launchbay stack of real processes: `launchbay api` and `launchbay worker`s over HTTP."""

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from devstack.procs import SESSION_MARKER, free_port, start, stop, stop_all, wait_until
from jobs.states import JobState

LAUNCHBAY = str(Path(sys.executable).parent / "launchbay")
# What a worker passes on to jobs from its own environment, besides its allow-list.
PASS_ENV = "LAUNCHBAY_JOB_PASS_ENV"


@dataclass
class Stack:
    root: Path
    database_url: str
    redis_url: str
    marker: str
    extra_env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    # The API's LAUNCHBAY_ADMIN_TOKEN; the clients and CLI runs of the tests use it.
    admin_token: str = field(default_factory=lambda: f"lb_{secrets.token_urlsafe(32)}")
    api: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, **more: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                SESSION_MARKER: self.marker,
                "LAUNCHBAY_DATA_DIR": str(self.data_dir),
                "LAUNCHBAY_DATABASE_URL": self.database_url,
                "LAUNCHBAY_REDIS_URL": self.redis_url,
                "LAUNCHBAY_API_URL": self.url,
                "LAUNCHBAY_ADMIN_TOKEN": self.admin_token,
                "LAUNCHBAY_TOKEN": self.admin_token,
                "LAUNCHBAY_CANCEL_GRACE_S": "3",
                **self.extra_env,
                **more,
            }
        )
        # The marker reaches the ranks too, so that leftovers of theirs are found.
        passed = [name for name in env.get(PASS_ENV, "").split(",") if name]
        env[PASS_ENV] = ",".join(dict.fromkeys([*passed, SESSION_MARKER]))
        return env

    def start_api(self, wait: bool = True, launchbay: Sequence[str] = (LAUNCHBAY,)) -> None:
        """`launchbay api` with the stack's environment (`launchbay` being the command: a script
        that registers an executor first, say), answering once this returns; with `wait` false,
        only started (then `wait_for_api`), so that workers start while it applies migrations."""
        self.api = start(
            [*launchbay, "api", "--host", "127.0.0.1", "--port", str(self.port)],
            self.env(),
            self.root / "api.log",
        )
        if wait:
            self.wait_for_api()

    def wait_for_api(self) -> None:
        if not wait_until(self._healthy, timeout=60, interval=0.05):
            raise RuntimeError(f"launchbay api did not start:\n{self.api_log()}")

    def _healthy(self) -> bool:
        assert self.api is not None
        if self.api.poll() is not None:
            raise RuntimeError(f"launchbay api exited:\n{self.api_log()}")
        try:
            return httpx.get(f"{self.url}/v1/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop_api(self) -> None:
        if self.api is not None:
            stop(self.api)
            self.api = None

    def start_worker(
        self,
        *queues: str,
        args: Sequence[str] = (),
        prefix: Sequence[str] = (),
        launchbay: Sequence[str] = (LAUNCHBAY,),
        **env: str,
    ) -> subprocess.Popen[bytes]:
        """`[prefix] launchbay worker --queue Q ... [args]` with the stack's environment plus
        `env`, `launchbay` being the command (another interpreter's `python -m client.cli`).
        The prefix must exec the worker (as `ip netns exec NS` does), so that the process the
        stack stops is the worker itself."""
        argv = [*prefix, *launchbay, "worker"]
        for q in queues or ("default",):
            argv += ["--queue", q]
        argv += args
        index = len(self.workers)
        worker_env = self.env(**env)
        for secret in ("LAUNCHBAY_ADMIN_TOKEN", "LAUNCHBAY_TOKEN"):
            worker_env.pop(secret, None)  # a worker needs no API token (docs/security.md)
        proc = start(argv, worker_env, self.root / f"worker-{index}.log")
        self.workers.append(proc)
        return proc

    def stop_workers(self) -> None:
        stop_all(self.workers, timeout=30)
        self.workers.clear()

    def stop(self) -> None:
        """Every worker and the API, told to stop at once: each waits for none of the others."""
        stop_all([*self.workers, *([self.api] if self.api is not None else [])], timeout=30)
        self.workers.clear()
        self.api = None

    def api_log(self) -> str:
        return _tail(self.root / "api.log")

    def worker_logs(self) -> str:
        return "\n".join(_tail(p) for p in sorted(self.root.glob("worker-*.log")))

    def client(self, token: str | None = None, **headers: str) -> httpx.Client:
        """An HTTP client of the API, with the admin token unless given another."""
        auth = {"Authorization": f"Bearer {token or self.admin_token}"}
        return httpx.Client(base_url=self.url, timeout=30, headers={**auth, **headers})

    def wait_for_state(
        self,
        http: httpx.Client,
        job_id: str,
        states: set[str],
        timeout: float = 120,
        interval: float = 0.2,
    ) -> dict[str, Any]:
        """Poll the job until it is in one of `states`; fails with the logs if it never is."""
        deadline = time.monotonic() + timeout
        job: dict[str, Any] = {}
        while time.monotonic() < deadline:
            job = http.get(f"/v1/jobs/{job_id}").json()
            if job.get("state") in states:
                return job
            if JobState(job["state"]).is_terminal():
                break
            time.sleep(interval)
        raise AssertionError(
            f"job {job_id} is {job.get('state')}, wanted {sorted(states)}: {job}\n"
            f"--- api\n{self.api_log()}\n--- workers\n{self.worker_logs()}"
        )


def _tail(path: Path, lines: int = 60) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
