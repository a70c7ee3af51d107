"""Readiness names the dependency that does not answer."""

from pathlib import Path

from fastapi.testclient import TestClient

from service.app import create_app
from service.db import upgrade_database
from service.settings import Settings
from tests.integration.conftest import ADMIN, ADMIN_TOKEN
from tests.support.procs import free_port


def test_ready_is_503_naming_redis_when_redis_is_down(tmp_path: Path, sqlite_url: str) -> None:
    upgrade_database(sqlite_url)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=sqlite_url,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        admin_token=ADMIN_TOKEN,
    )
    with TestClient(create_app(settings), headers=ADMIN) as api:
        assert api.get("/v1/health").status_code == 200
        response = api.get("/v1/ready")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert "redis" in error["message"]
    assert error["detail"]["database"] == "ok"
    assert error["detail"]["redis"].startswith("error")


def test_submit_while_redis_is_down_keeps_the_job(tmp_path: Path, sqlite_url: str) -> None:
    upgrade_database(sqlite_url)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=sqlite_url,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        admin_token=ADMIN_TOKEN,
    )
    with TestClient(create_app(settings), headers=ADMIN) as api:
        response = api.post("/v1/jobs", json={"name": "x", "recipe": "synthetic"})
        assert response.status_code == 503
        error = response.json()["error"]
        assert error["code"] == "queue_unavailable"
        job = api.get(f"/v1/jobs/{error['detail']['job_id']}").json()
    assert job["state"] == "queued"
