"""`POST /v1/dry-run` over a real database and Redis: what would be launched, nothing
stored; bad input gets the error body."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.executors.slurm.queues import SlurmQueue
from service.settings import Settings
from tests.integration.conftest import ADMIN, count_jobs

SPEC = {"name": "dry", "recipe": "synthetic", "nproc_per_node": 2}


@pytest.fixture
def slurm_settings(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The service's settings, with the Slurm executor's own (`LAUNCHBAY_SLURM_QUEUES`)
    in the environment the API reads them from."""
    queue = SlurmQueue(partition="gpu", account="ml", time_limit="60")
    monkeypatch.setenv("LAUNCHBAY_SLURM_QUEUES", json.dumps({"hpc": queue.model_dump()}))
    return settings


@pytest.fixture
def slurm_api(slurm_settings: Settings) -> Iterator[TestClient]:
    app = create_app(slurm_settings)
    with TestClient(app, raise_server_exceptions=False, headers=ADMIN) as client:
        yield client


def test_a_slurm_queue_shows_the_sbatch_script(
    slurm_api: TestClient, slurm_settings: Settings
) -> None:
    response = slurm_api.post("/v1/dry-run", json={**SPEC, "queue": "hpc", "nnodes": 2})
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["executor"], body["queue"]) == ("slurm", "hpc")
    assert body["tasks"] == [{"task_id": f"launchbay-{body['job_id']}-1", "node": None}]
    script = body["sbatch_script"]
    assert "#SBATCH --partition=gpu\n#SBATCH --account=ml\n#SBATCH --nodes=2\n" in script
    assert f"#SBATCH --output={Path(slurm_settings.data_dir).resolve()}/runs/" in script
    assert body["spec"]["nproc_per_node"] == 2
    assert count_jobs(slurm_settings) == 0


def test_an_rq_queue_shows_its_tasks(slurm_api: TestClient, slurm_settings: Settings) -> None:
    body = slurm_api.post("/v1/dry-run", json={**SPEC, "nnodes": 2}).json()
    assert body["executor"] == "rq" and body["sbatch_script"] is None
    assert [t["node"] for t in body["tasks"]] == [0, 1]
    assert count_jobs(slurm_settings) == 0


def test_bad_specs_and_callers_get_the_error_body(slurm_api: TestClient) -> None:
    bad = slurm_api.post("/v1/dry-run", json={**SPEC, "queue": "hpc\n#SBATCH --uid=0"})
    assert bad.status_code == 422 and bad.json()["error"]["code"]
    unknown = slurm_api.post("/v1/dry-run", json={**SPEC, "partition": "other"})
    assert unknown.status_code == 422 and unknown.json()["error"]["code"]
    nobody = slurm_api.post("/v1/dry-run", json=SPEC, headers={"Authorization": ""})
    assert nobody.status_code == 401 and nobody.json()["error"]["code"]
    not_json = slurm_api.post(
        "/v1/dry-run", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert not_json.status_code in (400, 422) and not_json.json()["error"]["code"]
