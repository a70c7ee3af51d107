"""A checkpoint whose upload the store drops half-way (the S3 server stops mid-upload) is not
registered while it is not whole in the store, is tried again, and is registered once the
store is back, with the bytes and the sha256 of the file."""

import hashlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.contract.checkpoints import CheckpointPolicy
from jobs.states import AttemptRef
from service import records
from service.artifacts import open_store
from service.db import make_engine, upgrade_database
from service.settings import Settings
from tests.support.procs import wait_until
from tests.support.registry import running_job
from tests.support.services import S3Server, private_s3
from worker.checkpoints import CheckpointRegistrar
from worker.events import CheckpointEvent

SIZE = 64 * 1024 * 1024


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A server of this test's own: it is stopped and started again."""
    with private_s3() as server:
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        yield server


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'launchbay.db'}"
    upgrade_database(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()


def listed(engine: Engine, job_id: str) -> list[str]:
    with Session(engine) as session:
        return [c.path for c in records.list_checkpoints(session, job_id)]


def test_an_upload_cut_by_the_store_is_retried_and_only_then_registered(
    s3: S3Server, engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="worker.checkpoint_upload")
    settings = Settings(
        data_dir=tmp_path / "data",
        artifact_store=s3.store_url("interrupted"),
        s3_endpoint_url=s3.endpoint(),
    )
    artifacts = open_store(settings)
    job_id = running_job(engine)
    folder = settings.checkpoints_dir / job_id
    folder.mkdir(parents=True)
    data = os.urandom(SIZE)
    (folder / "big.pt").write_bytes(data)
    key = f"checkpoints/{job_id}/big.pt"
    registrar = CheckpointRegistrar(
        engine,
        AttemptRef(job_id, 1),
        data_dir=settings.data_dir,
        checkpoint_dir=folder,
        policy=CheckpointPolicy(),
        store=artifacts,
        upload_retry_s=120,
    )
    registrar.add(CheckpointEvent(path="big.pt", step=1, epoch=0, metrics={}))
    registrar.poll()  # settled at once: the upload starts in the background

    log = s3.dir / "moto.log"
    assert wait_until(lambda: "?uploads" in log.read_text(), timeout=30), log.read_text()
    s3.stop()  # the store goes away mid-upload
    down_since = time.monotonic()
    while time.monotonic() - down_since < 1.0:
        registrar.poll()
        assert registrar.registered == 0 and listed(engine, job_id) == []
        time.sleep(0.05)

    s3.start()  # back, empty (moto keeps nothing in memory across a restart)

    def registered() -> bool:
        registrar.poll()
        return registrar.registered == 1

    assert wait_until(registered, timeout=90), "the upload was not retried to the end"
    assert registrar.rejected == 0
    assert any("trying again" in r.getMessage() for r in caplog.records), "never interrupted"
    with Session(engine) as session:
        [row] = records.list_checkpoints(session, job_id)
    assert row.path == key
    assert row.sha256 == hashlib.sha256(data).hexdigest() and row.size == SIZE
    assert artifacts.size(key) == SIZE
    digest = hashlib.sha256()
    for chunk in artifacts.get(key):
        digest.update(chunk)
    assert digest.hexdigest() == row.sha256
