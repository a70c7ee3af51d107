"""`launchbay goodput`: many jobs' ledgers summed up, or one job's parts, as the API answers
them (against a fake API): the CLI shows the parts and computes none."""

import json

from tests.unit.client.conftest import FakeApi, error_body, reply
from tests.unit.client.test_client_cli import launchbay

NAMES = ["queued", "environment", "launch", "first_step", "checkpoint_stall", "eval", "hang"]
NAMES += ["lost_work", "retry_gap", "teardown"]
SUMMARY = {
    "owner": "alice",
    "queue": None,
    "since": "2024-01-01T00:00:00Z",
    "until": "2024-01-08T00:00:00Z",
    "jobs": 3,
    "wall_hours": 5.0,
    "device_hours": 16.0,
    "trained_device_hours": 12.0,
    "badput_device_hours": 4.0,
    "goodput": 0.75,
    "badput": [
        {
            "name": n,
            "hours": 1.0 if n == "queued" else 0.5,
            "device_hours": 0.0 if n == "queued" else 0.5,
        }
        for n in NAMES
    ],
    "owners": [
        {
            "owner": "alice",
            "jobs": 3,
            "device_hours": 16.0,
            "trained_device_hours": 12.0,
            "goodput": 0.75,
        }
    ],
    "lost_most": [
        {
            "job_id": "j-lost",
            "name": "killed",
            "owner": "alice",
            "queue": "default",
            "state": "succeeded",
            "device_hours": 8.0,
            "trained_device_hours": 5.0,
            "badput_device_hours": 3.0,
            "goodput": 0.625,
        }
    ],
}
PARTS = [
    {
        "name": n,
        "seconds": 2.0,
        "device_seconds": 4.0,
        "detail": "over quota" if n == "queued" else None,
    }
    for n in ["training", *NAMES]
]
LEDGER = {
    "job_id": "j1",
    "final": True,
    "wall_s": 22.0,
    "device_s": 44.0,
    "goodput": 0.0909,
    "parts": PARTS,
    "attempts": [],
}


def test_goodput_prints_training_and_badput_by_part_and_the_jobs_that_lost_most(
    api: FakeApi,
) -> None:
    api.on("GET", "/v1/goodput", reply(200, SUMMARY))
    result = launchbay(api, "goodput", "--since", "7d", "--queue", "default")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "lost_work" in out and "checkpoint_stall" in out and "75.0%" in out
    assert "j-lost" in out and "3.000" in out
    assert "alice: 3 job(s)" in out and "16.000 device-hours held" in out
    params = api.requests[0].url.params
    assert (params["since"], params["queue"]) == ("7d", "default") and "owner" not in params
    as_json = launchbay(api, "goodput", "--json")
    assert json.loads(as_json.stdout)["lost_most"][0]["job_id"] == "j-lost"
    assert api.requests[-1].url.params["since"] == "7d"  # the default period


def test_goodput_of_one_job_prints_its_parts(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1/goodput", reply(200, LEDGER))
    result = launchbay(api, "goodput", "j1")
    assert result.exit_code == 0, result.output
    assert "over quota" in result.stdout and "teardown" in result.stdout
    assert "goodput 9.1% (final)" in result.stdout


def test_goodput_of_another_owner_is_refused_as_the_api_says(api: FakeApi) -> None:
    message = "only an admin reads the goodput of other owners"
    api.on("GET", "/v1/goodput", error_body(403, "forbidden", message))
    result = launchbay(api, "goodput", "--owner", "bob")
    assert result.exit_code == 1 and f"error forbidden: {message}" in result.stderr
    assert api.requests[0].url.params["owner"] == "bob"
