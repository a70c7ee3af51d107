"""Checkpoints registered the way the worker registers them (worker.checkpoints, with its
uploads to the artifact store), for tests of what the API and the clients do with them."""

import time
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.spec import JobSpec
from jobs.states import AttemptRef, JobState
from service import records
from service.artifacts import ArtifactStore
from worker.checkpoints import CheckpointRegistrar
from worker.events import CheckpointEvent


def running_job(engine: Engine, **spec: object) -> str:
    """A job at attempt 1, running, as a worker would have it."""
    with Session(engine, expire_on_commit=False) as session:
        job = records.create_job(session, JobSpec(name="stored", recipe="synthetic", **spec))
        records.transition_job(session, job.id, JobState.STARTING, attempt=1)
        records.transition_job(session, job.id, JobState.RUNNING, attempt=1)
    return job.id


def register(
    engine: Engine,
    artifacts: ArtifactStore,
    data_dir: Path,
    job_id: str,
    reports: list[tuple[str, int, float]],
    policy: CheckpointPolicy | None = None,
) -> CheckpointRegistrar:
    """Register what `reports` names ((path, step, loss), under the job's checkpoint
    directory) through the worker's registrar; returns it once every report is settled."""
    registrar = CheckpointRegistrar(
        engine,
        AttemptRef(job_id, 1),
        data_dir=data_dir,
        checkpoint_dir=data_dir / "checkpoints" / job_id,
        policy=policy or CheckpointPolicy(keep_last=10),
        store=artifacts,
        upload_retry_s=5,
    )
    for path, step, loss in reports:
        registrar.add(CheckpointEvent(path=path, step=step, epoch=0, metrics={"loss": loss}))
    deadline = time.monotonic() + 60
    while registrar.pending and time.monotonic() < deadline:
        registrar.poll()
        time.sleep(0.02)
    registrar.poll(final=True)
    return registrar
