"""Directory checkpoints (torch.distributed.checkpoint folders) in the s3 artifact store, with
real torchrun: uploaded as each is reported, registered once whole in the store, retention
deleting from the store, and the retried attempt resumed on a worker with an empty data dir
of its own, which fetches the job's code and the checkpoint from the store."""

import hashlib
import io
import tarfile
import uuid

import pytest

from service.artifacts import ObjectMissing, open_store
from service.code_store import keep_in_store
from tests.integration.worker.conftest import WorkerEnv
from tests.support.isolation import reachable_by_job_users
from tests.support.services import S3Server


def test_directory_checkpoints_in_the_store_resume_on_a_worker_that_never_saw_them(
    wenv: WorkerEnv, s3_server: S3Server, s3_prefix: str
) -> None:
    wenv.settings = wenv.settings.model_copy(
        update={
            "artifact_store": s3_server.store_url(s3_prefix),
            "s3_endpoint_url": s3_server.endpoint(),
        }
    )
    artifacts = open_store(wenv.settings)
    policy = {"keep_last": 2, "best_metric": "loss", "best_mode": "min"}
    job_id = wenv.submit(
        "dcp_dirs.py", max_retries=1, queue=f"dcp-{uuid.uuid4().hex[:8]}", checkpoint=policy
    )
    code_id = wenv.job(job_id).job_spec().code.code_id  # type: ignore[union-attr]
    keep_in_store(artifacts, wenv.settings.code_dir, code_id)  # as POST /v1/code does

    first = wenv.run(job_id)
    assert first.retried, wenv.job(job_id).message
    rows = wenv.checkpoints(job_id)
    # step-2 is the best (loss 1), step-3 and step-4 the last two; step-1 went
    assert [r.path.rsplit("/", 1)[1] for r in rows] == ["step-2", "step-3", "step-4"]
    for row in rows:
        assert (row.kind, row.attempt) == ("dir", 1)
        body = b"".join(artifacts.get(row.path))
        assert hashlib.sha256(body).hexdigest() == row.sha256 and len(body) == row.size
        with tarfile.open(fileobj=io.BytesIO(body)) as archive:
            names = sorted(m.name for m in archive)
        assert names == sorted(e["path"] for e in row.manifest or []) and len(names) == row.files
        assert ".metadata" in names
    with pytest.raises(ObjectMissing):
        artifacts.size(f"checkpoints/{job_id}/step-1")
    assert not (wenv.settings.checkpoints_dir / job_id / "step-1").exists()

    # The next attempt runs on "another worker": nothing of the first in its data dir.
    other = reachable_by_job_users(wenv.settings.data_dir.parent / "other-worker")
    wenv.settings = wenv.settings.model_copy(update={"data_dir": other})
    wenv.run(job_id, attempt=2)
    job = wenv.job(job_id)
    assert (job.state, job.attempt) == ("succeeded", 2), job.message
    lines = [line.line for line in wenv.logs(job_id)]
    for rank in (0, 1):
        assert f"rank {rank} resumed from step-4 at step 4 weight 32.0" in lines
    assert (other / "code" / code_id).is_dir(), "the code came from the store"
    latest = wenv.checkpoints(job_id)[-1]
    assert (latest.path.rsplit("/", 1)[1], latest.attempt, latest.kind) == ("step-5", 2, "dir")
    assert artifacts.size(latest.path) == latest.size
