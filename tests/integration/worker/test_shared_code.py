"""Attempts of a job share one read-only copy of its uploaded code (real torchrun)."""

import stat
import uuid

from tests.integration.worker.conftest import WorkerEnv


def test_every_attempt_runs_the_jobs_one_read_only_copy_of_its_code(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("fail_rank.py", max_retries=1, queue=f"shared-{uuid.uuid4().hex[:8]}")
    assert wenv.run(job_id).retried
    assert not wenv.run(job_id, attempt=2).retried

    runs = wenv.settings.runs_dir / job_id
    shared = runs / "code"
    assert shared.is_dir() and not shared.is_symlink()
    for attempt in (1, 2):
        link = runs / f"attempt-{attempt}" / "code"
        assert link.is_symlink() and link.resolve() == shared.resolve()
    copies = [p for p in runs.rglob("fail_rank.py") if not p.parent.is_symlink()]
    assert copies == [shared / "fail_rank.py"]
    mode = stat.S_IMODE((shared / "fail_rank.py").stat().st_mode)
    assert mode & 0o222 == 0, oct(mode)
    assert not [p.name for p in runs.iterdir() if p.name.startswith(".")]  # no staging left
