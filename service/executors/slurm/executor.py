"""`SlurmExecutor`: the executor (`service.executors.base.Executor`) for the queues an operator
maps to Slurm (`SlurmSettings`). A task is one Slurm batch job per attempt, named
`launchbay-<job id>-<attempt>`, so the executor needs no record of Slurm's ids: it finds its
jobs by name.
"""

import logging
from collections.abc import Sequence
from pathlib import Path

from service.executors.base import DryRunPlan, TaskPlan, TaskStatus
from service.executors.slurm import commands
from service.executors.slurm.queues import SlurmQueue
from service.executors.slurm.script import SbatchPlan, build_sbatch_script, slurm_job_name
from service.executors.slurm.states import slurm_end
from service.models import Job

log = logging.getLogger(__name__)


class SlurmExecutor:
    name = "slurm"
    # Slurm says how an allocation ended, and why a pending one waits.
    reports_ends = True
    # Its commands authenticate as the Unix user (munge): no credential in the environment.
    secret_env: frozenset[str] = frozenset()

    def __init__(self, queues: dict[str, SlurmQueue], *, data_dir: Path, grace_s: float) -> None:
        self.queues, self.data_dir, self.grace_s = queues, data_dir.resolve(), grace_s

    def sbatch_plan(self, job: Job) -> SbatchPlan:
        return build_sbatch_script(
            job.id,
            job.attempt,
            job.job_spec(),
            self.queues[job.queue],
            data_dir=self.data_dir,
            grace_s=self.grace_s,
        )

    def plan(self, job: Job) -> list[TaskPlan]:
        return [TaskPlan(slurm_job_name(job.id, job.attempt), job.id, job.attempt, None)]

    def dry_run(self, job: Job) -> DryRunPlan:
        return DryRunPlan(self.name, self.plan(job), self.sbatch_plan(job).script)

    def submit(self, job: Job) -> None:
        plan = self.sbatch_plan(job)
        plan.output.parent.mkdir(parents=True, exist_ok=True)
        slurm_id = commands.sbatch(plan.script)
        log.info("job %s attempt %d: Slurm job %s", job.id, job.attempt, slurm_id)

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        """squeue for what the controller still holds; sacct (when the cluster keeps
        accounting) for the rest. A name neither knows is a lost task."""
        names = {slurm_job_name(job.id, job.attempt): job.id for job in jobs}
        if not names:
            return {}
        found: dict[str, commands.SlurmJob] = {}
        for j in _newest_first(commands.squeue(sorted(names))):
            found.setdefault(j.name, j)
        unknown = sorted(set(names) - set(found))
        if unknown:
            for j in _newest_first(commands.sacct(unknown)):
                found.setdefault(j.name, j)
        described: dict[str, list[TaskStatus]] = {}
        for name, job_id in names.items():
            slurm = found.get(name)
            if slurm is None:
                status = TaskStatus(name, live=False)
            else:
                end = slurm_end(slurm.state, slurm.slurm_id, slurm.reason)
                pending = _pending_reason(slurm)
                status = TaskStatus(name, live=end is None, ended=end, pending_reason=pending)
            described[job_id] = [status]
        return described

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        self.submit(job)

    def cancel(self, job: Job) -> None:
        commands.scancel(slurm_job_name(job.id, job.attempt))


def _pending_reason(job: commands.SlurmJob) -> str | None:
    """Why Slurm keeps a PENDING allocation waiting, as the job shows it (`Slurm: Resources`,
    squeue's REASON); None before its scheduler has looked at it (squeue's reason is then
    `None`)."""
    if job.state.upper() != "PENDING" or job.reason in (None, "None"):
        return None
    return f"Slurm: {job.reason}"


def _newest_first(jobs: list[commands.SlurmJob]) -> list[commands.SlurmJob]:
    """A name resubmitted has several Slurm jobs: the newest (largest id) counts."""

    def key(job: commands.SlurmJob) -> int:
        head = job.slurm_id.split("_")[0].split("+")[0]
        return int(head) if head.isdigit() else -1

    return sorted(jobs, key=key, reverse=True)
