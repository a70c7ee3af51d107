"""The built-in `synthetic` recipe through the worker: the real runtime SDK inside the ranks
(metrics, checkpoints, a failing rank, resuming in a second attempt)."""

import threading

import pytest

from jobs.states import ExitReason
from service.db import session_scope
from service.records import create_job, requeue_job
from tests.integration.worker.conftest import WorkerEnv
from tests.support.procs import wait_until
from worker.attempt import AttemptResult

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
    # The SDK recorded the error, then aborted the group (not destroyed it).
    said = "[launchbay] rank 1 failed (RuntimeError: synthetic failure on rank 1); aborting"
    assert any(row.rank == 1 and row.line.startswith(said) for row in wenv.logs(job_id))


def test_a_retry_resumes_from_the_latest_checkpoint(wenv: WorkerEnv) -> None:
    job_id = submit_recipe(
        wenv, max_retries=1, config={"epochs": 3, "sleep_per_step_s": 0.2, "log_every_steps": 1}
    )
    first: list[AttemptResult] = []
    thread = threading.Thread(target=lambda: first.append(wenv.run(job_id)), daemon=True)
    thread.start()
    assert wait_until(lambda: wenv.checkpoints(job_id), timeout=60)
    with session_scope(wenv.engine) as session:  # what the reaper does with a lost worker
        retried = requeue_job(session, job_id, 1, exit_reason=ExitReason.WORKER_LOST)
    assert retried is not None and retried.attempt == 2
    requeued_seq = wenv.job(job_id).last_seq
    thread.join(timeout=30)

    # The first attempt saw the job taken away, stopped its ranks and wrote nothing more.
    [stopped] = first
    assert stopped.outcome is None and not stopped.recorded and not stopped.survivors
    assert all(row.seq <= requeued_seq for row in wenv.metrics(job_id) + wenv.logs(job_id))
    resume_step = max(c.step or 0 for c in wenv.checkpoints(job_id))
    result = wenv.run(job_id, attempt=2)

    job = wenv.job(job_id)
    assert (job.state, job.attempt) == ("succeeded", 2), job.message
    assert result.paths.run_dir.name == "attempt-2"
    second = [line.line for line in wenv.logs(job_id) if line.attempt == 2 and line.rank == 0]
    assert any(line.startswith(f"resumed at step {resume_step}:") for line in second), second
    steps = [p.step for p in wenv.metrics(job_id) if p.attempt == 2 and p.name == "loss"]
    assert steps and min(s for s in steps if s is not None) == resume_step + 1
