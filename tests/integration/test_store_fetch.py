"""What a worker takes from the store before a resumed attempt: the latest checkpoint of an
earlier attempt, fetched into its own empty data dir and checked against its sha256 (one that
does not match is passed over for the one before); with the local store, the one in place."""

from pathlib import Path

from service.artifacts import LocalStore, open_store
from service.db import make_engine, upgrade_database
from service.settings import Settings
from tests.integration.client.test_store_downloads_live import write_checkpoints
from tests.support.registry import register, running_job
from tests.support.services import S3Server
from worker.fetch import find_resume_checkpoint


def test_the_resume_checkpoint_is_fetched_verified_and_unpacked(
    tmp_path: Path, s3_server: S3Server, s3_prefix: str
) -> None:
    url = f"sqlite:///{tmp_path / 'launchbay.db'}"
    upgrade_database(url)
    engine = make_engine(url)
    settings = Settings(
        data_dir=tmp_path / "first",
        artifact_store=s3_server.store_url(s3_prefix),
        s3_endpoint_url=s3_server.endpoint(),
    )
    artifacts = open_store(settings)
    job_id = running_job(engine)
    files = write_checkpoints(settings.checkpoints_dir / job_id)
    reports = [("model.pt", 1, 0.5), ("checkpoint-500", 500, 0.25)]
    assert register(engine, artifacts, settings.data_dir, job_id, reports).registered == 2

    assert find_resume_checkpoint(engine, job_id, 1, tmp_path / "other", artifacts) is None
    other = tmp_path / "other"
    found = find_resume_checkpoint(engine, job_id, 2, other, artifacts)
    assert found == other / "checkpoints" / job_id / "checkpoint-500" and found.is_dir()
    for rel, data in files.items():
        if rel.startswith("checkpoint-500/"):
            assert (other / "checkpoints" / job_id / rel).read_bytes() == data
    assert not list(found.parent.glob(".*")), "no staging left behind"

    # The latest object no longer matches its registry entry: the one before is taken.
    third = tmp_path / "third"
    artifacts.put(f"checkpoints/{job_id}/checkpoint-500", [b"not the registered tar"])
    found = find_resume_checkpoint(engine, job_id, 2, third, artifacts)
    assert found == third / "checkpoints" / job_id / "model.pt"
    assert found.read_bytes() == files["model.pt"]
    assert not (third / "checkpoints" / job_id / "checkpoint-500").exists()

    # The local store: what is in the data dir, in place.
    local = find_resume_checkpoint(engine, job_id, 2, settings.data_dir, LocalStore(tmp_path))
    assert local == settings.data_dir / "checkpoints" / job_id / "checkpoint-500"
    engine.dispose()
