"""Which executor runs a job: the one place that routes jobs between backends.

Jobs on the queues named in `LAUNCHBAY_SLURM_QUEUES` go to Slurm (`service.slurm`), which
schedules them itself; every other job takes the RQ path (`service.queue.RQExecutor`, or
the dispatcher's `service.scheduling.executor.DispatchExecutor`).
`make_executor` is what the API, the reaper and the worker call.
"""

from collections.abc import Sequence

from redis import Redis
from sqlalchemy.engine import Engine

from service.executor import Executor, TaskPlan, TaskStatus
from service.models import Job
from service.scheduling.executor import make_worker_executor
from service.settings import Settings
from service.slurm.executor import SlurmExecutor


class RoutingExecutor:
    """An executor that hands each job to Slurm when its queue is a Slurm queue, else to
    `default`."""

    def __init__(self, default: Executor, slurm: SlurmExecutor) -> None:
        self.default, self.slurm = default, slurm

    def for_job(self, job: Job) -> Executor:
        return self.slurm if job.queue in self.slurm.queues else self.default

    def plan(self, job: Job) -> list[TaskPlan]:
        return self.for_job(job).plan(job)

    def submit(self, job: Job) -> None:
        self.for_job(job).submit(job)

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        on_slurm = [job for job in jobs if job.queue in self.slurm.queues]
        others = [job for job in jobs if job.queue not in self.slurm.queues]
        described = self.default.describe(others) if others else {}
        if on_slurm:
            described.update(self.slurm.describe(on_slurm))
        return described

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        self.for_job(job).resubmit(job, task_ids)

    def cancel(self, job: Job) -> None:
        self.for_job(job).cancel(job)


def make_executor(settings: Settings, redis: Redis, engine: Engine) -> Executor:
    """The executor for this process: RQ (first in first out, or under the dispatcher), with
    Slurm beside it when queues are mapped to it."""
    workers = make_worker_executor(settings, redis, engine)
    if not settings.slurm_queues:
        return workers
    slurm = SlurmExecutor(
        settings.slurm_queues, data_dir=settings.data_dir, grace_s=settings.cancel_grace_s
    )
    return RoutingExecutor(workers, slurm)


def slurm_executor_for(executor: Executor, job: Job) -> SlurmExecutor | None:
    """The Slurm executor that runs this job, if it is one (for `submit --dry-run`)."""
    if isinstance(executor, RoutingExecutor):
        chosen = executor.for_job(job)
        return chosen if isinstance(chosen, SlurmExecutor) else None
    return None
