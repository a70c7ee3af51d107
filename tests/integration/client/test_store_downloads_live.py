"""Checkpoints in the artifact store, downloaded through the API and through a presigned URL.

The worker's registrar stores a file and a directory checkpoint (the local store: the data
dir; the s3 store: moto's S3 server, through the same client as production); the API serves
them with the sha256 as ETag, Range answered with 206, a directory as its tar stream; with
presigned downloads on, it answers 307 to the store and the SDK follows, still verifying.
"""

import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session

from client import Client
from client.errors import ChecksumMismatch, NotFound
from jobs.states import JobState
from service import records
from service.artifacts import ObjectMissing, open_store
from service.db import make_engine, upgrade_database
from service.settings import Settings
from tests.integration.client.conftest import ADMIN_TOKEN, serve_api
from tests.support.registry import register, running_job
from tests.support.services import S3Server

AUTH = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def make_settings(tmp_path: Path, redis_url: str, **store: object) -> Settings:
    data_dir = tmp_path / "data"
    data_dir.mkdir(exist_ok=True)
    database_url = f"sqlite:///{data_dir / 'launchbay.db'}"
    upgrade_database(database_url)
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        redis_url=redis_url,
        admin_token=ADMIN_TOKEN,
        **store,  # type: ignore[arg-type]
    )


def safetensors(size: int) -> bytes:
    header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
    return len(header).to_bytes(8, "little") + header.encode() + os.urandom(size)


def write_checkpoints(folder: Path) -> dict[str, bytes]:
    """A single file, and a directory as Trainer writes one."""
    files = {
        "model.pt": os.urandom(300_000),
        "checkpoint-500/model.safetensors": safetensors(200_000),
        "checkpoint-500/trainer_state.json": b'{"global_step": 500}',
        "checkpoint-500/nested/rng_state.pth": os.urandom(1000),
    }
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return files


@pytest.fixture(params=["local", "s3", "s3-presigned"])
def stored(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str
) -> Iterator[tuple[str, str, Settings, dict[str, bytes]]]:
    """(API URL, job id, settings, the files) with both checkpoints registered and, for the
    remote store, the worker's copies gone (as on a worker of another host)."""
    store_kind: str = request.param
    options: dict[str, object] = {}
    if store_kind != "local":
        s3: S3Server = request.getfixturevalue("s3_server")
        prefix: str = request.getfixturevalue("s3_prefix")
        options = {
            "artifact_store": s3.store_url(prefix),
            "s3_endpoint_url": s3.endpoint(),
            "s3_presigned_downloads": store_kind == "s3-presigned",
        }
    settings = make_settings(tmp_path, redis_url, **options)
    engine = make_engine(settings.resolved_database_url)
    artifacts = open_store(settings)
    try:
        job_id = running_job(engine)
        folder = settings.checkpoints_dir / job_id
        files = write_checkpoints(folder)
        registrar = register(
            engine,
            artifacts,
            settings.data_dir,
            job_id,
            [("model.pt", 100, 0.5), ("checkpoint-500", 500, 0.25)],
        )
        assert registrar.registered == 2 and registrar.rejected == 0
        if artifacts.remote:
            shutil.rmtree(folder)
        with serve_api(settings) as url:
            yield url, job_id, settings, files
    finally:
        engine.dispose()


def test_downloads_verify_and_ranges_are_exact(
    stored: tuple[str, str, Settings, dict[str, bytes]], tmp_path: Path
) -> None:
    url, job_id, settings, files = stored
    base = f"{url}/v1/jobs/{job_id}/checkpoints"
    with httpx.Client(headers=AUTH, timeout=30, follow_redirects=True) as http:
        listed = {c["path"].rsplit("/", 1)[1]: c for c in http.get(base).json()["items"]}
        single, folder = listed["model.pt"], listed["checkpoint-500"]
        assert (single["kind"], single["files"]) == ("file", 1)
        assert (folder["kind"], folder["files"]) == ("dir", 3)
        manifest = {e["path"]: e for e in folder["manifest"]}
        for rel, data in files.items():
            if rel.startswith("checkpoint-500/"):
                entry = manifest[rel.removeprefix("checkpoint-500/")]
                assert entry == {
                    "path": rel.removeprefix("checkpoint-500/"),
                    "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }

        # Followed to the store when presigned (its own ETag then; the API's is in the 307).
        whole = http.get(f"{base}/{single['id']}/download")
        assert whole.status_code == 200
        assert whole.content == files["model.pt"]
        assert hashlib.sha256(whole.content).hexdigest() == single["sha256"]
        if not settings.s3_presigned_downloads:
            assert whole.headers["etag"].strip('"') == single["sha256"]
        part = http.get(f"{base}/{single['id']}/download", headers={"Range": "bytes=1000-1999"})
        assert part.status_code == 206 and part.content == files["model.pt"][1000:2000]

        tar = http.get(f"{base}/latest/download")
        assert tar.status_code == 200, tar.text
        assert tar.headers["content-type"].startswith("application/x-tar")
        assert hashlib.sha256(tar.content).hexdigest() == folder["sha256"]
        assert len(tar.content) == folder["size"]
        with tarfile.open(fileobj=io.BytesIO(tar.content)) as archive:
            names = sorted(m.name for m in archive)
        assert names == sorted(manifest)
        tail = http.get(f"{base}/latest/download", headers={"Range": "bytes=-700"})
        assert tail.status_code == 206 and tail.content == tar.content[-700:]
        middle = http.get(f"{base}/latest/download", headers={"Range": "bytes=511-1600"})
        assert middle.status_code == 206 and middle.content == tar.content[511:1601]

        head = http.head(f"{base}/latest/download")
        assert head.status_code == 200
        assert head.headers["content-length"] == str(folder["size"])
        assert head.headers["etag"].strip('"') == folder["sha256"]

        past = http.get(f"{base}/latest/download", headers={"Range": f"bytes={10**9}-"})
        assert past.status_code == 416 and past.json()["error"]["code"] == "range_not_satisfiable"
        missing = http.get(f"{base}/nope/download")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

    with httpx.Client(headers=AUTH, timeout=30) as http:
        first = http.get(f"{base}/latest/download")
        if settings.s3_presigned_downloads:
            assert first.status_code == 307
            assert first.headers["location"].startswith(settings.s3_endpoint_url or "")
            assert "X-Amz-Signature" in first.headers["location"]
            assert first.headers["etag"].strip('"') == folder["sha256"]
        else:
            assert first.status_code == 200

    with Client(url, ADMIN_TOKEN, backoff_s=0) as lb:
        # A transfer cut short earlier: the SDK goes on with a Range request and still verifies.
        target = tmp_path / "got" / "model.pt"
        target.parent.mkdir()
        (target.parent / "model.pt.part").write_bytes(files["model.pt"][:12345])
        assert lb.download_checkpoint(job_id, single["id"], target) == target
        assert target.read_bytes() == files["model.pt"]

        unpacked = lb.download_checkpoint(job_id, "latest", tmp_path / "got" / "ckpt.tar")
        assert unpacked == tmp_path / "got" / "ckpt"
        for rel, data in files.items():
            if rel.startswith("checkpoint-500/"):
                assert (unpacked / rel.removeprefix("checkpoint-500/")).read_bytes() == data
        with pytest.raises(NotFound):
            lb.download_checkpoint(job_id, "0" * 32, tmp_path / "never.pt")

        # Bytes changed behind the registry's back (in the store, or the data dir) are refused,
        # through the API as through the store's URL, and nothing is left in place.
        tampered = bytearray(files["model.pt"])
        tampered[5] ^= 0xFF
        open_store(settings).put(single["path"], [bytes(tampered)])
        with pytest.raises(ChecksumMismatch):
            lb.download_checkpoint(job_id, single["id"], tmp_path / "bad.pt")
        assert not (tmp_path / "bad.pt").exists()

        # Deleting the finished job deletes its checkpoints from the store too.
        engine = make_engine(settings.resolved_database_url)
        with Session(engine) as session:
            records.transition_job(session, job_id, JobState.SUCCEEDED, attempt=1)
        engine.dispose()
        lb.delete_job(job_id)
        for item in (single, folder):
            with pytest.raises(ObjectMissing):
                open_store(settings).size(item["path"])
