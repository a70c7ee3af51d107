"""Retention retires a checkpoint's row, commits, then deletes its object from the store. A
pass cut off in between (the store down, or the host lost) leaves an object no live row
lists; the next attempt's first pass deletes it, and nothing live."""

from collections.abc import Iterable

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.states import AttemptRef, ExitReason, JobState
from service import records
from service.artifacts import ArtifactStore, ObjectMissing, StoreError, open_store
from service.settings import Settings
from tests.support.registry import running_job
from tests.support.services import S3Server
from worker.checkpoints import CheckpointRegistrar
from worker.events import CheckpointEvent


def settle(registrar: CheckpointRegistrar, path: str, step: int) -> None:
    registrar.add(CheckpointEvent(path=path, step=step, epoch=0, metrics={}))
    registrar.poll(final=True)


def test_objects_a_cut_retention_pass_left_are_deleted_by_the_next_attempt(
    engine: Engine,
    settings: Settings,
    s3_server: S3Server,
    s3_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    artifacts = open_store(
        settings.model_copy(
            update={
                "artifact_store": s3_server.store_url(s3_prefix),
                "s3_endpoint_url": s3_server.endpoint(),
            }
        )
    )
    job_id = running_job(engine, max_retries=1)
    folder = settings.checkpoints_dir / job_id
    folder.mkdir(parents=True)
    for name in ("a.pt", "b.pt", "c.pt"):
        (folder / name).write_bytes(name.encode() * 1000)

    def registrar(attempt: int, store: ArtifactStore) -> CheckpointRegistrar:
        return CheckpointRegistrar(
            engine,
            AttemptRef(job_id, attempt),
            data_dir=settings.data_dir,
            checkpoint_dir=folder,
            policy=CheckpointPolicy(keep_last=1),
            store=store,
            upload_retry_s=5,
        )

    def refuse(keys: Iterable[str]) -> None:
        raise StoreError(f"the store is down: {list(keys)}")

    first = registrar(1, artifacts)
    settle(first, "a.pt", 1)
    monkeypatch.setattr(artifacts, "delete", refuse)  # down as b retires a
    settle(first, "b.pt", 2)
    monkeypatch.undo()
    key = f"checkpoints/{job_id}"
    assert artifacts.size(f"{key}/a.pt") > 0, "a's object should be left behind"

    with Session(engine) as session:
        retried = records.requeue_job(session, job_id, 1, exit_reason=ExitReason.WORKER_LOST)
        assert retried is not None and retried.attempt == 2
        records.transition_job(session, job_id, JobState.STARTING, attempt=2)
        records.transition_job(session, job_id, JobState.RUNNING, attempt=2)
    second = registrar(2, artifacts)
    settle(second, "c.pt", 3)

    with Session(engine) as session:
        assert [c.path for c in records.list_checkpoints(session, job_id)] == [f"{key}/c.pt"]
    for gone in ("a.pt", "b.pt"):
        with pytest.raises(ObjectMissing):
            artifacts.size(f"{key}/{gone}")
    assert artifacts.size(f"{key}/c.pt") == 4000
