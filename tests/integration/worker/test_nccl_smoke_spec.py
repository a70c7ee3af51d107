"""examples/nccl-smoke.yaml through the real worker and torchrun: as written, a worker without
CUDA refuses it (it must never pass by training on CPU); with `--set device=cpu --set
backend=gloo`, the same job finishes well within its time limit on this CPU-only machine, so
on a GPU host only NCCL and the devices can make it fail."""

from pathlib import Path
from typing import Any

from client.specfile import apply_assignments, load_spec
from jobs.spec import JobSpec
from service.db import session_scope
from service.records import create_job
from tests.integration.worker.conftest import WorkerEnv

SMOKE = Path(__file__).resolve().parents[3] / "examples" / "nccl-smoke.yaml"


def submit(env: WorkerEnv, raw: dict[str, Any]) -> str:
    with session_scope(env.engine) as session:
        job_id = create_job(session, JobSpec.model_validate(raw)).id
    env.job_ids.add(job_id)
    return job_id


def test_the_smoke_job_is_refused_by_a_worker_without_cuda(wenv: WorkerEnv) -> None:
    job_id = submit(wenv, load_spec(SMOKE))
    result = wenv.run(job_id)
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("failed", "launch_error")
    assert job.message == "device=cuda, but this worker has no CUDA device"
    assert result.processes == []


def test_the_smoke_job_on_cpu_finishes_within_its_limits(wenv: WorkerEnv) -> None:
    raw = apply_assignments(load_spec(SMOKE), ["device=cpu", "backend=gloo"])
    job_id = submit(wenv, raw)
    wenv.run(job_id)
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("succeeded", "completed"), job.message
    first = next(row.line for row in wenv.logs(job_id) if row.rank == 0)
    assert "world 2 on cpu" in first, first
    assert len(wenv.checkpoints(job_id)) == 1
