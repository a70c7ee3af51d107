"""The peer baseline: the same torchrun command submitted through Ray Jobs, when Ray is
installed (`pip install -e '.[bench]'`; never a dependency of the service).

`RayCluster` starts a private head node (`ray start --head`, its own ports and temp dir, the
dashboard on for the Jobs API) and, when it exits, stops every process of it: each carries a
marker of its own in its environment, so nothing of another Ray on the machine is touched
(`ray stop` would stop them all): `ray start` runs in a session of its own, and every
process in that session, carrying the cluster's marker, or under one of those is stopped."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from bench.common import read_events, torchrun_env
from devstack.procs import SESSION_MARKER, free_port, marked_processes

REPO = Path(__file__).resolve().parents[1]


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None and _ray_cli() is not None


def _ray_cli() -> str | None:
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray")


class RayCluster:
    """A one-node Ray cluster for this run of the benchmark; a context manager."""

    def __init__(self, num_cpus: int | None = None) -> None:
        self.marker = f"ray-{uuid.uuid4().hex}"
        self.temp_dir = Path(tempfile.mkdtemp(prefix="lbray-"))
        self.port = free_port()
        self.dashboard_port = free_port()
        self.num_cpus = num_cpus or os.cpu_count() or 1
        self.client: Any = None
        self.session: int | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, SESSION_MARKER: self.marker, "RAY_USAGE_STATS_ENABLED": "0"}

    def __enter__(self) -> "RayCluster":
        cli = _ray_cli()
        if cli is None:
            raise RuntimeError("the ray command is not installed")
        argv = [
            cli,
            "start",
            "--head",
            f"--port={self.port}",
            f"--dashboard-port={self.dashboard_port}",
            "--include-dashboard=true",
            f"--num-cpus={self.num_cpus}",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
        ]
        try:
            starter = subprocess.Popen(
                argv,
                env=self.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.session = starter.pid
            output, _ = starter.communicate(timeout=180)
            if starter.returncode != 0:
                raise RuntimeError(f"ray start failed:\n{output.decode(errors='replace')}")
            from ray.job_submission import JobSubmissionClient

            deadline = time.monotonic() + 60
            while True:
                try:
                    self.client = JobSubmissionClient(f"http://127.0.0.1:{self.dashboard_port}")
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every process of this cluster, then SIGKILL what is left of it."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for proc in self.processes():
                try:
                    proc.send_signal(sig)
                except psutil.Error:
                    continue
            deadline = time.monotonic() + grace_s
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def processes(self) -> list[psutil.Process]:
        """The live processes of this cluster (see the module docstring)."""
        found = {proc.pid: proc for proc in marked_processes(self.marker)}
        if self.session is not None:
            for proc in psutil.process_iter(["status"]):
                try:
                    if (
                        proc.info["status"] != psutil.STATUS_ZOMBIE
                        and os.getsid(proc.pid) == self.session
                    ):
                        found[proc.pid] = proc
                except (OSError, psutil.Error):
                    continue
        for proc in list(found.values()):
            try:
                found.update((child.pid, child) for child in proc.children(recursive=True))
            except psutil.Error:
                continue
        found.pop(os.getpid(), None)
        return [proc for proc in found.values() if _alive(proc)]

    def submit(
        self, module: str, config: dict[str, Any], workdir: Path, nproc: int = 2
    ) -> tuple[str, Path]:
        """Submit `bench.common.bare_torchrun`'s command as a Ray job; (its id, its events
        file)."""
        workdir.mkdir(parents=True, exist_ok=True)
        events = workdir / "events.jsonl"
        ours = torchrun_env(events, workdir, config)
        ours["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p
        )
        command = (
            f"cd {json.dumps(str(workdir))} && {sys.executable} -m torch.distributed.run "
            f"--standalone --nproc_per_node={nproc} -m {module}"
        )
        job_id = self.client.submit_job(entrypoint=command, runtime_env={"env_vars": ours})
        return job_id, events

    def stop_job(self, job_id: str, timeout_s: float = 60) -> None:
        """Stop a Ray job and wait until Ray says it ended."""
        self.client.stop_job(job_id)
        deadline = time.monotonic() + timeout_s
        while not self.client.get_job_status(job_id).is_terminal():
            if time.monotonic() > deadline:
                raise RuntimeError(f"Ray job {job_id} did not stop in {timeout_s} s")
            time.sleep(0.2)

    def torchrun(
        self,
        module: str,
        config: dict[str, Any],
        workdir: Path,
        nproc: int = 2,
        poll_s: float = 0.2,
        timeout_s: float = 900,
    ) -> tuple[float, list[dict[str, Any]]]:
        """The same command as a Ray job, waited for to its end; returns (submit time,
        events)."""
        from ray.job_submission import JobStatus

        start = time.time()
        job_id, events = self.submit(module, config, workdir, nproc)
        deadline = time.monotonic() + timeout_s
        while True:
            status = self.client.get_job_status(job_id)
            if status.is_terminal():
                break
            if time.monotonic() > deadline:
                self.client.stop_job(job_id)
                raise RuntimeError(f"Ray job {job_id} did not end in {timeout_s} s")
            time.sleep(poll_s)
        if status != JobStatus.SUCCEEDED:
            logs = self.client.get_job_logs(job_id)[-3000:]
            raise RuntimeError(f"Ray job {job_id} ended {status}:\n{logs}")
        return start, read_events(events)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
