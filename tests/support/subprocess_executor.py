"""An executor for the tests, to show that adding one is one module plus its registration:
each task of an attempt is a child process of the API (or the reaper, or a worker retrying)
that runs the worker's generic node entry, `python -m worker.node JOB ATTEMPT [--node N]`.
No RQ, no worker process.

It owns the queues in `LAUNCHBAY_SUBPROCESS_QUEUES` (comma-separated). Run as a script, it
registers itself and then runs the `launchbay` command line given after it:

    python tests/support/subprocess_executor.py api --host 127.0.0.1 --port 8000
"""

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from service.executors.base import DryRunPlan, TaskPlan, TaskStatus
from service.executors.registry import ExecutorContext, register
from service.models import Job

NAME = "subprocess"
SCRIPT = str(Path(__file__).resolve())


class SubprocessSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LAUNCHBAY_SUBPROCESS_", extra="ignore")

    queues: Annotated[list[str], NoDecode] = []

    @field_validator("queues", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    def owned_queues(self) -> frozenset[str]:
        return frozenset(self.queues)


class SubprocessExecutor:
    name = NAME
    reports_ends = False
    secret_env: frozenset[str] = frozenset()
    # The children of this process, by task id (every executor this process makes shares them).
    children: dict[str, subprocess.Popen[bytes]] = {}

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()

    def plan(self, job: Job) -> list[TaskPlan]:
        nnodes = job.job_spec().nnodes
        nodes: list[int | None] = [None] if nnodes == 1 else list(range(nnodes))
        prefix = f"{NAME}-{job.id}-{job.attempt}"
        return [
            TaskPlan(prefix if n is None else f"{prefix}-node{n}", job.id, job.attempt, n)
            for n in nodes
        ]

    def dry_run(self, job: Job) -> DryRunPlan:
        return DryRunPlan(self.name, self.plan(job))

    def submit(self, job: Job) -> None:
        for task in self.plan(job):
            self.start(task)

    def start(self, task: TaskPlan) -> None:
        argv = [sys.executable, "-m", "worker.node", task.job_id, str(task.attempt)]
        if task.node is not None:
            argv += ["--node", str(task.node)]
        output = self.data_dir / "runs" / task.job_id / f"{task.task_id}.out"
        output.parent.mkdir(parents=True, exist_ok=True)
        with open(output, "ab") as out:
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        self.children[task.task_id] = child

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        described: dict[str, list[TaskStatus]] = {}
        for job in jobs:
            for task in self.plan(job):
                child = self.children.get(task.task_id)
                live = child is not None and child.poll() is None
                described.setdefault(job.id, []).append(TaskStatus(task.task_id, live))
        return described

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        for task in self.plan(job):
            if task.task_id in task_ids:
                self.start(task)

    def cancel(self, job: Job) -> None:
        """Nothing to withdraw: a child that has not taken the attempt yet finds it cancelled
        and exits; a running one's supervisor reads the cancel from the database."""


def make_subprocess_executor(
    context: ExecutorContext, own: SubprocessSettings
) -> SubprocessExecutor:
    return SubprocessExecutor(context.settings.data_dir)


def register_subprocess_executor() -> None:
    register(NAME, make_subprocess_executor, SubprocessSettings)


if __name__ == "__main__":
    register_subprocess_executor()
    from client.cli import main

    sys.argv[0] = "launchbay"
    main()
