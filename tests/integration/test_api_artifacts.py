"""A job's artifacts (files under its LAUNCHBAY_OUTPUT_DIR) listed and downloaded, and every
way out of the job's directory refused."""

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.settings import Settings
from tests.integration.conftest import copy_migrated_sqlite
from tests.integration.test_api_results import finished_job

SECRET = b"the database password"


@pytest.fixture
def database_url(sqlite_url: str, migrated_sqlite_file: Path) -> str:
    """SQLite only: the point is the file system, not the database."""
    return copy_migrated_sqlite(migrated_sqlite_file, sqlite_url)


@pytest.fixture
def job_with_artifacts(settings: Settings) -> str:
    job_id = finished_job(settings)
    root = settings.data_dir.resolve() / "artifacts" / job_id
    (root / "plots").mkdir(parents=True)
    (root / "model.pt").write_bytes(b"m" * 5000)
    (root / "plots" / "loss.png").write_bytes(b"png")
    (settings.data_dir / "secret.txt").write_bytes(SECRET)
    (root / "link").symlink_to(settings.data_dir.resolve() / "secret.txt")
    (root / "plots" / "dirlink").symlink_to(settings.data_dir.resolve())
    return job_id


def test_artifacts_are_listed_and_downloaded(api: TestClient, job_with_artifacts: str) -> None:
    base = f"/v1/jobs/{job_with_artifacts}/artifacts"
    items = api.get(base).json()["items"]
    assert [(i["path"], i["size"]) for i in items] == [("model.pt", 5000), ("plots/loss.png", 3)]

    response = api.get(f"{base}/plots/loss.png")
    assert (response.status_code, response.content) == (200, b"png")
    head = api.head(f"{base}/model.pt")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == "5000"
    assert head.headers["accept-ranges"] == "bytes" and head.headers["etag"]
    part = api.get(f"{base}/model.pt", headers={"Range": "bytes=4990-"})
    assert (part.status_code, part.content) == (206, b"m" * 10)


@pytest.mark.parametrize(
    "path",
    [
        "../../secret.txt",
        "%2e%2e/%2e%2e/secret.txt",
        "..%2f..%2fsecret.txt",
        "plots/../../../secret.txt",
        "%2fetc%2fpasswd",
        "/etc/passwd",
        "link",
        "plots/dirlink/secret.txt",
        "plots",
        "..\\..\\secret.txt",
    ],
)
def test_no_path_leads_out_of_the_job_s_artifacts(
    api: TestClient, job_with_artifacts: str, path: str
) -> None:
    for method in ("GET", "HEAD"):
        response = api.request(method, f"/v1/jobs/{job_with_artifacts}/artifacts/{path}")
        # 404; 405 where the client resolved the dots itself and asked another route.
        assert response.status_code in (404, 405), (method, path, response.status_code)
        assert SECRET not in response.content


def test_a_job_without_artifacts_lists_none(api: TestClient, settings: Settings) -> None:
    job_id = finished_job(settings)
    assert api.get(f"/v1/jobs/{job_id}/artifacts").json()["items"] == []
    assert api.get(f"/v1/jobs/{job_id}/artifacts/x.txt").status_code == 404


def test_deleting_a_job_deletes_its_artifacts(
    api: TestClient, settings: Settings, job_with_artifacts: str
) -> None:
    assert api.delete(f"/v1/jobs/{job_with_artifacts}").status_code == 204
    assert not (Path(settings.data_dir) / "artifacts" / job_with_artifacts).exists()
    assert (Path(settings.data_dir) / "secret.txt").read_bytes() == SECRET
