"""The built-in `synthetic` recipe through the worker: the real runtime SDK inside the ranks
(metrics, checkpoints, a failing rank, resuming in a second attempt)."""

import pytest

from jobs.states import JobState
from service.db import session_scope
from service.models import Job
from service.store import create_job, transition_job
from tests.integration.worker.conftest import WorkerEnv

pytest.importorskip("jobs.recipes.synthetic")

from jobs.spec import JobSpec  # noqa: E402


def submit_recipe(env: WorkerEnv, **fields: object) -> str:
    spec = JobSpec.model_validate({"name": "synthetic", "recipe": "synthetic", **fields})
    with session_scope(env.engine) as session:
        job_id = create_job(session, spec).id
    env.job_ids.add(job_id)
    return job_id


def test_synthetic_recipe_reports_metrics_and_checkpoints(wenv: WorkerEnv) -> None:
    job_id = submit_recipe(wenv, config={"epochs": 2}, checkpoint={"keep_last": 1})
    wenv.run(job_id)
    job = wenv.job(job_id)

    assert job.state == "succeeded", job.message
    assert job.message is None
    assert {p.name for p in wenv.metrics(job_id)} >= {"loss", "val_loss"}
    assert job.progress_epoch is not None and job.total_steps
    [checkpoint] = wenv.checkpoints(job_id)  # keep_last 1, no best metric
    assert checkpoint.epoch == job.progress_epoch


def test_synthetic_failure_names_the_rank(wenv: WorkerEnv) -> None:
    job_id = submit_recipe(wenv, config={"fail_on_rank": 1})
    wenv.run(job_id)
    job = wenv.job(job_id)

    assert (job.state, job.exit_reason, job.exit_code) == ("failed", "user_error", 1)
    assert job.message is not None
    assert job.message.startswith(
        "rank 1 failed (exit code 1): RuntimeError: synthetic failure on rank 1"
    )


def test_a_retry_resumes_from_the_latest_checkpoint(wenv: WorkerEnv) -> None:
    job_id = submit_recipe(wenv, config={"epochs": 1})
    wenv.run(job_id)
    assert len(wenv.checkpoints(job_id)) == 1
    with session_scope(wenv.engine) as session:  # what a retry does: attempt 2, queued again
        job = session.get(Job, job_id)
        assert job is not None
        job.state, job.attempt = JobState.QUEUED, 2
        session.add(job)
        session.commit()
    assert not transition_job_as_attempt_1(wenv, job_id)
    result = wenv.run(job_id, attempt=2)

    job = wenv.job(job_id)
    assert (job.state, job.attempt) == ("succeeded", 2), job.message
    assert result.paths.run_dir.name == "attempt-2"
    second = [line.line for line in wenv.logs(job_id) if line.attempt == 2 and line.rank == 0]
    assert any(line.startswith("resumed at step") for line in second), second


def transition_job_as_attempt_1(env: WorkerEnv, job_id: str) -> bool:
    with session_scope(env.engine) as session:
        return transition_job(session, job_id, JobState.STARTING, attempt=1)
