"""`POST /v1/dry-run`: what submitting this spec would launch, without storing it or
launching anything (`launchbay submit --dry-run`): what the executor of the job's queue says
it would launch (`Executor.dry_run`): its name, its tasks, and the text its backend would be
handed, if any (for a Slurm queue, the exact sbatch script)."""

from fastapi import APIRouter
from pydantic import BaseModel

from jobs.spec import JobSpec
from jobs.states import JobState
from service import code_store, policy
from service.deps import CurrentPrincipal, ExecutorDep, SessionDep, SettingsDep
from service.models import Job
from service.records.lifecycle import new_id

router = APIRouter(prefix="/v1", tags=["jobs"])


class PlannedTask(BaseModel):
    task_id: str
    node: int | None


class DryRun(BaseModel):
    """What would be launched. `job_id` is an example: a submitted job gets an id of its own."""

    job_id: str
    queue: str
    executor: str
    spec: JobSpec
    tasks: list[PlannedTask]
    sbatch_script: str | None = None


@router.post("/dry-run", response_model=DryRun)
def dry_run_job(
    spec: JobSpec,
    session: SessionDep,
    executor: ExecutorDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
) -> DryRun:
    spec = policy.apply_submission_policy(spec, principal, settings)
    if spec.code is not None:
        owner = None if principal.is_admin else principal.name
        code_store.check_code_ref(session, settings.code_dir, spec.code, owner=owner)
    job = Job(
        id=new_id(),
        name=spec.name,
        owner=principal.name,
        state=JobState.QUEUED,
        spec=spec.model_dump(mode="json"),
        queue=spec.queue,
        attempt=1,
    )
    plan = executor.dry_run(job)
    return DryRun(
        job_id=job.id,
        queue=job.queue,
        executor=plan.executor,
        spec=spec,
        tasks=[PlannedTask(task_id=t.task_id, node=t.node) for t in plan.tasks],
        sbatch_script=plan.script,
    )
