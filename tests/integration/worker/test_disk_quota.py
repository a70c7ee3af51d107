"""A running job is held to what its owner's disk quota leaves it: the worker measures its
files while it runs and stops it, with exit reason `user_error` and a message that says why,
once they are over (not only when the attempt ends)."""

import uuid
from pathlib import Path

import pytest
from sqlalchemy import update

from service.db import session_scope
from service.models import Job
from tests.integration.worker.conftest import WorkerEnv
from worker import disk
from worker.isolation import can_switch_users
from worker.launch import RunPaths

QUOTA = 4_000_000


def owned_by(wenv: WorkerEnv, job_id: str, owner: str, disk_bytes: int | None = None) -> None:
    with session_scope(wenv.engine) as session:
        values: dict[str, object] = {"owner": owner}
        if disk_bytes is not None:
            values["disk_bytes"] = disk_bytes
        session.execute(update(Job).where(Job.id == job_id).values(**values))  # type: ignore[arg-type]
        session.commit()


def test_a_job_over_its_owners_quota_is_stopped_while_it_runs(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk, "DISK_CHECK_S", 0.2)
    monkeypatch.setattr(wenv.settings, "owner_disk_quota_bytes", QUOTA)
    # The owner's finished job holds half the quota; this one writes 3 MB more, under the quota
    # alone, over it with the other.
    held = wenv.submit("single.py", launcher="python", nproc_per_node=1)
    owned_by(wenv, held, "ann", disk_bytes=QUOTA // 2)
    env = {"WRITE_BYTES": str(3_000_000), "FILL_SLEEP_S": "30"}  # left alone: it succeeds
    job_id = wenv.submit("filler.py", launcher="python", nproc_per_node=1, env=env)
    owned_by(wenv, job_id, "ann")

    result = wenv.run(job_id)  # returns only once the job has been stopped

    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("failed", "user_error"), job.message
    assert job.message is not None and "over the owner's disk quota of 4000000" in job.message
    assert result.outcome is not None and not result.survivors
    # What it wrote there was no checkpoint it reported: it went with the attempt.
    assert job.disk_bytes is not None and job.disk_bytes < 3_000_000


def test_a_job_writing_past_the_quota_into_its_working_directory_is_stopped(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain program writing to `./`: stopped with the reason, and what it wrote is kept as
    its artifact, counted with the owner's files."""
    monkeypatch.setattr(disk, "DISK_CHECK_S", 0.2)
    monkeypatch.setattr(wenv.settings, "owner_disk_quota_bytes", QUOTA)
    env = {"WRITE_BYTES": str(5_000_000), "FILL_PATH": "out/fill.bin", "FILL_SLEEP_S": "30"}
    job_id = wenv.submit("filler.py", launcher="python", nproc_per_node=1, env=env)
    owned_by(wenv, job_id, "ann")

    wenv.run(job_id)

    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("failed", "user_error"), job.message
    assert job.message is not None and "over the owner's disk quota of 4000000" in job.message
    kept = wenv.settings.data_dir.resolve() / "artifacts" / job_id / "out" / "fill.bin"
    assert kept.stat().st_size == 5_000_000
    assert job.disk_bytes is not None and job.disk_bytes >= 5_000_000


def test_an_admins_job_is_not_held_to_the_quota(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk, "DISK_CHECK_S", 0.2)
    monkeypatch.setattr(wenv.settings, "owner_disk_quota_bytes", 1_000)
    env = {"WRITE_BYTES": str(100_000), "FILL_SLEEP_S": "2"}  # 10 checks over the quota
    job_id = wenv.submit("filler.py", launcher="python", nproc_per_node=1, env=env)
    owned_by(wenv, job_id, "admin")
    wenv.run(job_id)
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("succeeded", "completed"), job.message


@pytest.mark.skipif(not can_switch_users(), reason="a private scratch needs a root worker")
def test_what_a_job_keeps_in_tmp_var_tmp_and_dev_shm_counts_while_it_runs(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.5 MB in each: any two are under the quota, the three are over. When the attempt ends
    its /tmp and /var/tmp (in its run directory) are removed, and its /dev/shm is gone."""
    monkeypatch.setattr(disk, "DISK_CHECK_S", 0.2)
    monkeypatch.setattr(wenv.settings, "owner_disk_quota_bytes", QUOTA)
    name = f"fill-{uuid.uuid4().hex}"
    env = {"WRITE_BYTES": str(1_500_000), "FILL_NAME": name, "FILL_SLEEP_S": "10"}
    job_id = wenv.submit("scratch_filler.py", launcher="python", nproc_per_node=1, env=env)
    owned_by(wenv, job_id, "ann")
    try:
        wenv.run(job_id)
        job = wenv.job(job_id)
        assert (job.state, job.exit_reason) == ("failed", "user_error"), job.message
        assert job.message is not None and "over the owner's disk quota of 4000000" in job.message
        run_dir = RunPaths.for_attempt(wenv.settings.data_dir.resolve(), job_id, 1).run_dir
        assert not (run_dir / "tmp").exists() and not (run_dir / "var-tmp").exists()
        assert job.disk_bytes is not None and job.disk_bytes < 1_500_000
    finally:  # where the job wrote to the host's directories
        for directory in ("/tmp", "/var/tmp", "/dev/shm"):
            (Path(directory) / name).unlink(missing_ok=True)
