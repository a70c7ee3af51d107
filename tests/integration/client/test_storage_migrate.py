"""`launchbay storage migrate`: a populated local data dir (file and directory checkpoints,
uploaded code) is copied into the S3 store, the command can be run again and resumed, what
does not match its registered sha256 is refused, and after switching the API to the store
every download still verifies (the data dir's copies gone) and a worker fetches the code."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from sqlmodel import Session

from client import Client
from devstack.stack import LAUNCHBAY
from service.artifacts import LocalStore, ObjectMissing, code_key, open_store
from service.db import make_engine
from service.models import CodeUpload
from service.storage_migrate import migrate_to_store
from tests.integration.client.conftest import ADMIN_TOKEN, serve_api
from tests.integration.client.test_store_downloads_live import make_settings, write_checkpoints
from tests.support.registry import register, running_job
from tests.support.services import S3Server
from worker.fetch import fetch_code


def test_migrate_moves_a_data_dir_and_every_download_still_verifies(
    tmp_path: Path, redis_url: str, s3_server: S3Server, s3_prefix: str
) -> None:
    local = make_settings(tmp_path, redis_url)
    engine = make_engine(local.resolved_database_url)
    job_id = running_job(engine)
    files = write_checkpoints(local.checkpoints_dir / job_id)
    reports = [("model.pt", 1, 0.5), ("checkpoint-500", 500, 0.25)]
    assert register(engine, LocalStore(local.data_dir), local.data_dir, job_id, reports).registered
    code_id = "c" * 64
    (local.code_dir / code_id).mkdir(parents=True)
    (local.code_dir / code_id / "train.py").write_text("print('hello')\n")
    with Session(engine) as session:
        session.add(CodeUpload(code_id=code_id, owner="alice", filename="train.py", size=15))
        session.commit()

    target = s3_server.store_url(s3_prefix)
    env = {
        **os.environ,
        "LAUNCHBAY_DATA_DIR": str(local.data_dir),
        "LAUNCHBAY_DATABASE_URL": local.resolved_database_url,
        "LAUNCHBAY_S3_ENDPOINT_URL": s3_server.endpoint(),
    }
    done = subprocess.run(
        [LAUNCHBAY, "storage", "migrate", "--to", target],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "3 copied, 0 already in the store" in done.stdout, done.stdout

    remote = make_settings(
        tmp_path, redis_url, artifact_store=target, s3_endpoint_url=s3_server.endpoint()
    )
    artifacts = open_store(remote)
    # Stopped half-way earlier (one object never made it): the next run copies only that.
    artifacts.delete([f"checkpoints/{job_id}/checkpoint-500"])
    again = migrate_to_store(engine, local.data_dir, artifacts)
    assert (again.copied, again.present, again.failed) == (1, 2, [])
    assert migrate_to_store(engine, local.data_dir, artifacts).copied == 0

    # A file that no longer matches its registered sha256 is not put in the store.
    artifacts.delete([f"checkpoints/{job_id}/model.pt"])
    model = local.checkpoints_dir / job_id / "model.pt"
    model.write_bytes(b"tampered" + files["model.pt"][8:])
    refused = migrate_to_store(engine, local.data_dir, artifacts)
    assert refused.copied == 0 and len(refused.failed) == 1 and "model.pt" in refused.failed[0]
    with pytest.raises(ObjectMissing):
        artifacts.size(f"checkpoints/{job_id}/model.pt")
    model.write_bytes(files["model.pt"])
    assert migrate_to_store(engine, local.data_dir, artifacts).copied == 1

    # The switch: the API serves from the store; the data dir's checkpoints are gone.
    shutil.rmtree(local.checkpoints_dir)
    with serve_api(remote) as url, Client(url, ADMIN_TOKEN, backoff_s=0) as lb:
        for checkpoint in lb.list_checkpoints(job_id):
            saved = lb.download_checkpoint(job_id, checkpoint.id, tmp_path / "dl" / "x.tar")
            if checkpoint.kind == "dir":
                for entry in checkpoint.manifest or []:
                    data = (saved / entry["path"]).read_bytes()
                    assert hashlib.sha256(data).hexdigest() == entry["sha256"]
                shutil.rmtree(saved)
            else:
                assert saved.read_bytes() == files["model.pt"]
    fresh = tmp_path / "worker-code"
    assert fetch_code(artifacts, fresh, code_id)
    assert (fresh / code_id / "train.py").read_text() == "print('hello')\n"
    assert artifacts.size(code_key(code_id)) > 0
    engine.dispose()
