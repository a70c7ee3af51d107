"""Submitting, listing, cancelling and deleting jobs, on SQLite and PostgreSQL."""

import json
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from rq import Queue
from sqlmodel import Session

from jobs.spec import JobSpec
from jobs.states import JobState
from service import records
from service.app import create_app
from service.db import make_engine
from service.models import Job
from service.settings import Settings
from tests.integration.conftest import ADMIN, count_jobs
from tests.support.procs import free_port, wait_until

SYNTHETIC = {"name": "quick", "recipe": "synthetic", "nproc_per_node": 2}


def assert_error_body(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "detail"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
    return body["error"]


def test_submit_fills_defaults_and_wakes_the_dispatcher(
    api: TestClient, settings: Settings
) -> None:
    response = api.post("/v1/jobs", json=SYNTHETIC)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["state"] == "queued"
    assert job["attempt"] == 1
    assert job["spec"]["launcher"] == "torchrun"
    assert job["spec"]["checkpoint"]["keep_last"] == 3
    assert job["spec"]["config"], "recipe config defaults are filled in"
    assert job["created_at"].endswith(("Z", "+00:00"))
    # No job goes straight onto a queue: the dispatcher, woken by the submission, admits it
    # where a worker has room, and says at once why it waits when none has.
    assert Queue("default", connection=redis.Redis.from_url(settings.redis_url)).job_ids == []
    assert wait_until(
        lambda: (
            api.get(f"/v1/jobs/{job['id']}").json()["pending_reason"]
            == "no worker serves queue 'default'"
        ),
        timeout=5,
    )
    shown = api.get(f"/v1/jobs/{job['id']}").json()
    assert shown == job | {
        "queue_position": 1,
        "pending_reason": "no worker serves queue 'default'",
    }
    assert job["launch_path"] is None  # until a worker starts its ranks, warm or cold


def test_whether_a_spec_named_its_launcher_is_kept(api: TestClient, settings: Settings) -> None:
    """Named (`launcher: torchrun`), the job starts cold; not named, warm where it can: the
    spec shows `torchrun` either way."""
    unnamed = api.post("/v1/jobs", json=SYNTHETIC).json()
    named = api.post("/v1/jobs", json={**SYNTHETIC, "launcher": "torchrun"}).json()
    assert unnamed["spec"]["launcher"] == named["spec"]["launcher"] == "torchrun"
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            given = {
                job_id: session.get(Job, job_id).launcher_given  # type: ignore[union-attr]
                for job_id in (unnamed["id"], named["id"])
            }
    finally:
        engine.dispose()
    assert given == {unnamed["id"]: False, named["id"]: True}


@pytest.mark.parametrize(
    "body",
    [
        {**SYNTHETIC, "colour": "blue"},
        {**SYNTHETIC, "code": {"code_id": "a" * 64, "entrypoint": "train.py"}},
        {"name": "nothing to run"},
        {**SYNTHETIC, "recipe": "no-such-recipe"},
        {**SYNTHETIC, "nproc_per_node": 0},
        {**SYNTHETIC, "nproc_per_node": 65},
        {**SYNTHETIC, "name": ""},
        {**SYNTHETIC, "name": "x" * 129},
        {**SYNTHETIC, "env": {"NOT-AN-IDENTIFIER": "1"}},
        {**SYNTHETIC, "config": {"no_such_option": 1}},
        {**SYNTHETIC, "launcher": "mpirun"},
        {**SYNTHETIC, "checkpoint": {"keep_last": 0}},
        {**SYNTHETIC, "outputs": {"checkpoints": ["../../../etc/passwd"]}},
        {**SYNTHETIC, "outputs": {"artifacts": ["/etc/*"]}},
        {**SYNTHETIC, "outputs": {"checkpoints": ["[z-a].pt"]}},
        {**SYNTHETIC, "outputs": {"checkpoints": "model.pt"}},
        {**SYNTHETIC, "outputs": {"checkpoints": ["x" * 257]}},
        [],
        "just a string",
    ],
)
def test_invalid_specs_are_refused(api: TestClient, settings: Settings, body: Any) -> None:
    error = assert_error_body(api.post("/v1/jobs", json=body), 422, "validation_error")
    assert error["detail"], "the offending fields are named"
    assert count_jobs(settings) == 0


def test_declared_outputs_are_accepted_as_globs_inside_the_working_directory(
    api: TestClient,
) -> None:
    """Their refusals are among the invalid specs above (a path out of it, a broken glob)."""
    outputs = {"checkpoints": ["./snapshot.pt", "out/checkpoint-*"], "artifacts": ["*.json"]}
    response = api.post("/v1/jobs", json={**SYNTHETIC, "outputs": outputs})
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["outputs"] == {
        "checkpoints": ["snapshot.pt", "out/checkpoint-*"],
        "artifacts": ["*.json"],
    }
    default = api.post("/v1/jobs", json=SYNTHETIC).json()
    assert default["spec"]["outputs"] is None


def test_non_json_body_is_refused(api: TestClient, settings: Settings) -> None:
    response = api.post(
        "/v1/jobs", content=b"name: not json", headers={"content-type": "application/json"}
    )
    assert_error_body(response, 400, "invalid_json")
    assert count_jobs(settings) == 0


def test_huge_body_is_refused(api: TestClient, settings: Settings) -> None:
    body = json.dumps({**SYNTHETIC, "tags": {"blob": "x" * (10 * 1024 * 1024)}})
    response = api.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert_error_body(response, 413, "payload_too_large")
    assert count_jobs(settings) == 0


def test_idempotency_key(api: TestClient, settings: Settings) -> None:
    headers = {"Idempotency-Key": "submit-once"}
    first = api.post("/v1/jobs", json=SYNTHETIC, headers=headers)
    again = api.post("/v1/jobs", json=SYNTHETIC, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    other = api.post("/v1/jobs", json={**SYNTHETIC, "name": "other"}, headers=headers)
    assert_error_body(other, 409, "idempotency_key_reused")
    assert count_jobs(settings) == 1


def test_list_is_newest_first_with_filter_and_paging(api: TestClient) -> None:
    ids = [
        api.post("/v1/jobs", json={**SYNTHETIC, "name": f"job-{i}"}).json()["id"] for i in range(3)
    ]
    listed = api.get("/v1/jobs").json()
    assert listed["total"] == 3
    assert [j["id"] for j in listed["items"]] == ids[::-1]
    page = api.get("/v1/jobs", params={"limit": 1, "offset": 1}).json()
    assert [j["id"] for j in page["items"]] == [ids[1]]
    assert page["total"] == 3
    api.post(f"/v1/jobs/{ids[0]}/cancel")
    cancelled = api.get("/v1/jobs", params={"state": "cancelled"}).json()
    assert [j["id"] for j in cancelled["items"]] == [ids[0]]
    assert_error_body(api.get("/v1/jobs", params={"state": "sleeping"}), 422)
    assert_error_body(api.get("/v1/jobs", params={"limit": 0}), 422)


def test_cancel_a_queued_job_takes_it_off_the_queue(api: TestClient, settings: Settings) -> None:
    job = api.post("/v1/jobs", json=SYNTHETIC).json()
    response = api.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 202
    cancelled = response.json()
    assert cancelled["state"] == "cancelled"
    assert cancelled["exit_reason"] == "cancelled"
    assert cancelled["finished_at"] is not None
    assert Queue("default", connection=redis.Redis.from_url(settings.redis_url)).job_ids == []
    again = api.post(f"/v1/jobs/{job['id']}/cancel")
    assert again.status_code == 202 and again.json()["state"] == "cancelled"


def test_delete_only_finished_jobs(api: TestClient, settings: Settings) -> None:
    job = api.post("/v1/jobs", json=SYNTHETIC).json()
    assert_error_body(api.delete(f"/v1/jobs/{job['id']}"), 409, "invalid_transition")
    api.post(f"/v1/jobs/{job['id']}/cancel")
    checkpoints = settings.checkpoints_dir / job["id"]
    checkpoints.mkdir(parents=True)
    (checkpoints / "step-1.pt").write_bytes(b"x")
    assert api.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert not checkpoints.exists()
    assert_error_body(api.get(f"/v1/jobs/{job['id']}"), 404, "not_found")
    assert count_jobs(settings) == 0


def test_unknown_ids_and_routes_answer_with_the_error_body(api: TestClient) -> None:
    assert_error_body(api.get("/v1/jobs/does-not-exist"), 404, "not_found")
    assert_error_body(api.get("/v1/jobs/..%2F..%2Fetc%2Fpasswd"), 404)
    assert_error_body(api.get("/v1/nothing-here"), 404, "not_found")
    assert_error_body(api.put("/v1/jobs"), 405, "method_not_allowed")


def test_logs_of_a_new_job_are_empty(api: TestClient) -> None:
    job = api.post("/v1/jobs", json=SYNTHETIC).json()
    logs = api.get(f"/v1/jobs/{job['id']}/logs", params={"rank": 1}).json()
    assert logs == {"items": [], "next_after": 0}
    assert_error_body(api.get(f"/v1/jobs/{job['id']}/logs", params={"rank": -1}), 422)


def test_recipes_lists_the_built_in_programs(api: TestClient) -> None:
    items = api.get("/v1/recipes").json()["items"]
    names = {r["name"] for r in items}
    assert {"synthetic", "digits", "text"} <= names
    for recipe in items:
        assert recipe["description"]
        assert recipe["config_schema"]["type"] == "object"


def test_health_and_ready(api: TestClient) -> None:
    assert api.get("/v1/health").json() == {"status": "ok"}
    ready = api.get("/v1/ready")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "redis": "ok"}


def test_validation_messages_say_what_is_wrong(api: TestClient) -> None:
    unknown = api.post("/v1/jobs", json={**SYNTHETIC, "recipe": "nope"}).json()["error"]
    assert "unknown recipe 'nope'" in unknown["message"]
    zero = api.post("/v1/jobs", json={**SYNTHETIC, "nproc_per_node": 0}).json()["error"]
    assert zero["message"].startswith("invalid request: nproc_per_node:")
    assert zero["detail"][0]["loc"] == ["body", "nproc_per_node"]


def test_prometheus_metrics_count_jobs_by_state(api: TestClient) -> None:
    api.post("/v1/jobs", json=SYNTHETIC)
    job = api.post("/v1/jobs", json=SYNTHETIC).json()
    api.post(f"/v1/jobs/{job['id']}/cancel")
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert 'launchbay_jobs{state="queued"} 1' in lines
    assert 'launchbay_jobs{state="cancelled"} 1' in lines
    assert "launchbay_metric_points 0" in lines


def test_recipe_config_errors_are_located_under_config(api: TestClient) -> None:
    error = api.post("/v1/jobs", json={**SYNTHETIC, "config": {"lr": -1}}).json()["error"]
    assert error["detail"][0]["loc"] == ["body", "config", "lr"]
    assert error["message"].startswith("invalid request: config.lr:")


def test_a_cancel_while_redis_is_down_is_accepted_and_left_to_the_heartbeat(
    settings: Settings,
) -> None:
    """One answer, whatever Redis does: 202 and `cancelling`; the job's supervisor reads that
    state at its next heartbeat (tests/integration/worker/test_stops.py: the state cancels
    even without the Redis key)."""
    job_id = submit_running_job(settings)
    dead = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(dead), raise_server_exceptions=False, headers=ADMIN) as api:
        answer = api.post(f"/v1/jobs/{job_id}/cancel")
        assert answer.status_code == 202, answer.text
        assert answer.json()["state"] == "cancelling"
        assert api.get(f"/v1/jobs/{job_id}").json()["state"] == "cancelling"


def submit_running_job(settings: Settings) -> str:
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            job = records.create_job(session, JobSpec(name="running", recipe="synthetic"))
            for state in (JobState.STARTING, JobState.RUNNING):
                assert records.transition_job(session, job.id, state, attempt=1)
            return job.id
    finally:
        engine.dispose()
