"""Checkpoint registration: only complete files inside the job's directory, with their sha256;
retention keeps the last `keep_last` plus the best."""

import hashlib

from tests.integration.worker.conftest import WorkerEnv


def test_only_complete_checkpoints_are_registered_and_retention_applies(wenv: WorkerEnv) -> None:
    policy = {"keep_last": 2, "best_metric": "loss", "best_mode": "min"}
    job_id = wenv.submit("checkpoints.py", checkpoint=policy)
    wenv.run(job_id)
    job = wenv.job(job_id)
    assert job.state == "succeeded", job.message

    checkpoints = wenv.checkpoints(job_id)
    # good-2 has the lowest loss; good-4 and good-5 are the last two
    assert [c.path.rsplit("/", 1)[1] for c in checkpoints] == [
        "good-2.pt",
        "good-4.pt",
        "good-5.pt",
    ]
    data_dir = wenv.settings.data_dir.resolve()
    for checkpoint in checkpoints:
        content = (data_dir / checkpoint.path).read_bytes()
        assert checkpoint.sha256 == hashlib.sha256(content).hexdigest()
        assert checkpoint.size == len(content)
        assert checkpoint.step == int(checkpoint.path[-4])
    assert [c.seq for c in checkpoints] == sorted(c.seq for c in checkpoints)

    folder = data_dir / "checkpoints" / job_id
    assert not (folder / "good-1.pt").exists() and not (folder / "good-3.pt").exists()
    # the truncated, growing, escaping (../, absolute, symlink) and missing ones
    assert job.message == "6 reported checkpoint(s) not registered"
    # Not kept; and what the ranks wrote in their checkpoint directory went with the attempt.
    assert not (folder / "truncated.pt").exists() and not (folder / "growing.pt").exists()
    assert not (wenv.settings.runs_dir / job_id / "attempt-1" / "checkpoints").exists()
