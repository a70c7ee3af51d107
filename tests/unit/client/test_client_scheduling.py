"""`launchbay queue`, `launchbay usage`, and a queued job's place and reason in `status` and
`list`, against a fake API."""

import json

from tests.unit.client.conftest import FakeApi, error_body, job, reply
from tests.unit.client.test_client_cli import launchbay

QUEUE = {
    "items": [
        {
            "position": 1,
            "job_id": "j2",
            "name": "mine",
            "owner": "alice",
            "queue": "default",
            "priority": 0,
            "nnodes": 2,
            "nproc_per_node": 4,
            "created_at": "2024-01-01T00:00:00Z",
            "pending_reason": "waiting for 2 node(s) with 4 free device(s)",
        },
        {
            "position": 2,
            "job_id": None,
            "name": None,
            "owner": None,
            "queue": "default",
            "priority": 0,
            "nnodes": 1,
            "nproc_per_node": 1,
            "created_at": "2024-01-01T00:00:01Z",
            "pending_reason": None,
        },
    ],
    "total": 2,
    "dispatcher": {"leader": "h:1:ab", "token": 3, "expires_at": "2024-01-01T00:00:09Z"},
}
USAGE = {
    "since": "2024-01-01T00:00:00Z",
    "until": "2024-01-02T00:00:00Z",
    "items": [{"owner": "alice", "device_seconds": 7200.0, "jobs": 3}],
}


def test_queue_lists_the_waiting_jobs_in_order_with_their_reasons(api: FakeApi) -> None:
    api.on("GET", "/v1/queue", reply(200, QUEUE))
    result = launchbay(api, "queue")
    assert result.exit_code == 0, result.output
    assert "4 free device(s)" in result.stdout  # the reason, folded to the width
    assert "2x4" in result.stdout and "(another owner's)" in result.stdout
    assert result.stdout.index("j2") < result.stdout.index("(another owner's)")
    as_json = launchbay(api, "queue", "--json")
    assert json.loads(as_json.stdout)["items"][0]["job_id"] == "j2"


def test_usage_prints_device_seconds_and_hours(api: FakeApi) -> None:
    api.on("GET", "/v1/usage", reply(200, USAGE))
    result = launchbay(api, "usage", "--owner", "alice", "--since", "2024-01-01T00:00:00Z")
    assert result.exit_code == 0, result.output
    assert "alice" in result.stdout and "7200" in result.stdout and "2.000" in result.stdout
    assert api.requests[0].url.params["owner"] == "alice"
    assert api.requests[0].url.params["since"] == "2024-01-01T00:00:00Z"


def test_usage_of_another_owner_is_refused_as_the_api_says(api: FakeApi) -> None:
    api.on("GET", "/v1/usage", error_body(403, "forbidden", "only an admin reads the usage"))
    result = launchbay(api, "usage", "--owner", "bob")
    assert result.exit_code == 1
    assert "error forbidden: only an admin reads the usage" in result.stderr


def test_status_and_list_show_why_a_job_waits(api: FakeApi) -> None:
    waiting = job(state="queued", queue_position=3, pending_reason="owner quota: 8 of 8 devices")
    api.on("GET", "/v1/jobs/j1", reply(200, waiting))
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": []}))
    api.on("GET", "/v1/jobs", reply(200, {"items": [waiting], "total": 1}))
    status = launchbay(api, "status", "j1")
    assert status.exit_code == 0, status.output
    assert "owner quota: 8 of 8 devices" in status.stdout and "3" in status.stdout
    listed = launchbay(api, "list")
    assert "queued #3" in listed.stdout
