"""Webhooks over the wire: a real receiver on loopback (with the opt-in), real deliveries from
the API's delivery loop, the address policy, retries, redelivery, and an API restart."""

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from jobs.states import JobState
from service import records
from service.app import create_app
from service.db import make_engine
from service.models import Webhook
from service.settings import Settings
from tests.integration.conftest import ADMIN
from tests.integration.test_api_jobs import SYNTHETIC, assert_error_body
from tests.integration.test_auth import make_token, send
from tests.support.webhook_receiver import Received, verify, webhook_receiver

FAST = {"webhook_poll_s": 0.1, "webhook_backoff_s": 0.1}
# The database matters only where deliveries are claimed and retried; the rest runs on SQLite.
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
postgres_only = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


@pytest.fixture
def open_api(settings: Settings) -> Iterator[TestClient]:
    """The app with loopback webhooks allowed (the opt-in) and quick retries."""
    opened = settings.model_copy(update={"webhook_allow_private": True, **FAST})
    app = create_app(opened)
    with TestClient(app, raise_server_exceptions=False, headers=ADMIN) as client:
        yield client


def deliveries(api: TestClient, hook_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/v1/webhooks/{hook_id}/deliveries")
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def wait_for_delivery(api: TestClient, hook_id: str, status: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [d for d in deliveries(api, hook_id) if d["status"] == status]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(deliveries(api, hook_id))


@postgres_only
def test_a_receiver_that_fails_three_times_gets_the_delivery_on_the_fourth_try(
    open_api: TestClient,
) -> None:
    with webhook_receiver([500, 500, 500]) as receiver:
        hook = open_api.post("/v1/webhooks", json={"url": receiver.url, "events": ["state"]})
        assert hook.status_code == 201, hook.text
        secret = hook.json()["secret"]
        job = open_api.post("/v1/jobs", json=SYNTHETIC).json()
        delivered = wait_for_delivery(open_api, hook.json()["id"], "delivered")
        assert (delivered["attempts"], delivered["last_status_code"]) == (4, 200)
        assert delivered["job_id"] == job["id"] and delivered["last_error"] is None
        tries = list(receiver.received)
    assert len(tries) == 4
    # One delivery, four tries: the same id and the same body, each signed afresh.
    assert {t.delivery_id for t in tries} == {delivered["id"]}
    assert {t.body for t in tries} == {tries[0].body}
    assert all(verify(secret, t) for t in tries)
    payload = tries[0].payload
    assert set(payload) == {"id", "type", "created_at", "job"}
    assert (payload["id"], payload["type"]) == (delivered["id"], "state")
    assert (payload["job"]["id"], payload["job"]["state"]) == (job["id"], "queued")
    assert tries[0].headers["content-type"] == "application/json"


@sqlite_only
def test_redelivery_sends_the_same_delivery_again_and_slack_gets_text(
    open_api: TestClient,
) -> None:
    with webhook_receiver() as receiver:
        body = {"url": receiver.url, "events": ["state"], "format": "slack"}
        hook = open_api.post("/v1/webhooks", json=body).json()
        open_api.post("/v1/jobs", json={**SYNTHETIC, "name": "slacky"})
        first = wait_for_delivery(open_api, hook["id"], "delivered")
        path = f"/v1/webhooks/{hook['id']}/deliveries/{first['id']}/redeliver"
        assert open_api.post(path).status_code == 202
        receiver.wait_for(lambda got: len(got) == 2)
        tries = list(receiver.received)
    assert [t.delivery_id for t in tries] == [first["id"], first["id"]]
    assert set(tries[0].payload) == {"text"} and "slacky" in tries[0].payload["text"]
    assert "queued" in tries[0].payload["text"]
    assert all(verify(hook["secret"], t) for t in tries)
    assert_error_body(open_api.post(f"/v1/webhooks/{hook['id']}/deliveries/nope/redeliver"), 404)


FORBIDDEN_URLS = [
    "http://127.0.0.1/hook",
    "http://localhost:8080/hook",
    "http://10.1.2.3/",
    "http://192.168.0.10/",
    "http://172.16.5.5/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[fd00:ec2::254]/",
    "http://0.0.0.0/",
    "http://2130706433/",
    "http://100.64.0.1/",
    "file:///etc/passwd",
    "gopher://example.com/",
    "http://user:secret@93.184.215.14/",
    "http:///nohost",
    "http://bad host/",
]


@sqlite_only
def test_a_forbidden_address_is_refused_at_registration(api: TestClient) -> None:
    for url in FORBIDDEN_URLS:
        answer = api.post("/v1/webhooks", json={"url": url, "events": ["state"]})
        error = assert_error_body(answer, 422)
        assert error["code"] == "forbidden_address", (url, error)
    assert api.get("/v1/webhooks").json()["items"] == []


@sqlite_only
def test_registration_input_and_ownership(api: TestClient) -> None:
    ann, bob = make_token(api, "ann"), make_token(api, "bob")
    public = {"url": "http://93.184.215.14/hook", "events": ["terminal"]}
    for bad in (
        {**public, "events": []},
        {**public, "events": ["everything"]},
        {**public, "format": "xml"},
        {**public, "extra": 1},
        {"events": ["state"]},
        {**public, "url": "http://example.com/" + "a" * 3000},
    ):
        assert_error_body(send(api, "POST", "/v1/webhooks", ann, json=bad), 422)
    everyone = send(api, "POST", "/v1/webhooks", ann, json={**public, "all_jobs": True})
    assert_error_body(everyone, 403, "forbidden")
    created = send(api, "POST", "/v1/webhooks", ann, json=public)
    assert created.status_code == 201, created.text
    hook = created.json()
    assert set(hook) >= {"id", "url", "events", "secret"} and len(hook["secret"]) >= 32
    assert "secret" not in send(api, "GET", "/v1/webhooks", ann).json()["items"][0]
    # Another user neither sees nor removes it; an admin sees it.
    assert send(api, "GET", "/v1/webhooks", bob).json()["items"] == []
    for method, path in (
        ("DELETE", f"/v1/webhooks/{hook['id']}"),
        ("GET", f"/v1/webhooks/{hook['id']}/deliveries"),
    ):
        assert_error_body(send(api, method, path, bob), 404)
    assert [h["id"] for h in api.get("/v1/webhooks").json()["items"]] == [hook["id"]]
    assert send(api, "DELETE", f"/v1/webhooks/{hook['id']}", ann).status_code == 204
    assert send(api, "GET", "/v1/webhooks", ann).json()["items"] == []


@sqlite_only
def test_a_delivery_to_an_address_now_forbidden_is_refused_not_sent(
    api: TestClient, settings: Settings
) -> None:
    """A name that resolved to a public address at registration and to an internal one now
    (DNS rebinding): the check at delivery time refuses it."""
    with webhook_receiver() as receiver:
        engine = make_engine(settings.resolved_database_url)
        try:
            with Session(engine) as session:
                session.add(
                    Webhook(
                        id="rebound",
                        owner="admin",
                        url=receiver.url.replace("127.0.0.1", "localhost"),
                        events=["state"],
                        secret="s" * 64,
                    )
                )
                session.commit()
        finally:
            engine.dispose()
        api.post("/v1/jobs", json=SYNTHETIC)
        failed = wait_for_delivery(api, "rebound", "failed")
        assert receiver.received == []
    assert failed["attempts"] == 1 and "refused" in failed["last_error"]
    assert "loopback" in failed["last_error"]


def expected_events(received: list[Received], job_id: str) -> list[tuple[str, Any]]:
    """What the receiver got for one job, in order: (type, state or checkpoint step)."""
    found = []
    for item in received:
        payload = item.payload
        if payload["job"]["id"] != job_id:
            continue
        detail = payload.get("checkpoint", {}).get("step") or payload["job"]["state"]
        found.append((payload["type"], detail))
    return found


def drive_job(session: Session, job_id: str, end: JobState, checkpoint_dir: Path) -> None:
    """Move a job as a worker would: it starts, runs, saves two checkpoints (the first the
    best), and ends in `end`."""
    for state in (JobState.STARTING, JobState.RUNNING):
        assert records.transition_job(session, job_id, state, attempt=1)
    for step, loss in ((1, 0.5), (2, 0.7)):
        content = f"{job_id}-{step}".encode()
        records.register_checkpoint(
            session,
            job_id,
            1,
            path=str(checkpoint_dir / f"step-{step}.pt"),
            step=step,
            epoch=0,
            metrics={"loss": loss},
            size=len(content),
            sha256=hashlib.sha256(content).hexdigest(),
        )
    if end is JobState.CANCELLED:
        assert records.transition_job(session, job_id, JobState.CANCELLING, attempt=1)
    assert records.transition_job(session, job_id, end, attempt=1)


@sqlite_only
def test_one_verified_delivery_per_event_in_order_per_job_through_an_api_restart(
    settings: Settings, tmp_path: Path
) -> None:
    """The app is stopped (its delivery loop with it) while the jobs go on, and a new app on
    the same database, with nothing in memory from the first, delivers what they did."""
    opened = settings.model_copy(
        update={"webhook_allow_private": True, "reaper_enabled": False, **FAST}
    )
    kinds = ["state", "terminal", "checkpoint", "best"]
    spec = {**SYNTHETIC, "checkpoint": {"best_metric": "loss"}}
    with webhook_receiver() as receiver:
        with TestClient(create_app(opened), raise_server_exceptions=False) as first:
            ann = make_token(first, "ann")
            body = {"url": receiver.url, "events": kinds}
            hook = send(first, "POST", "/v1/webhooks", ann, json=body).json()
            jobs = [
                send(first, "POST", "/v1/jobs", ann, json={**spec, "name": n}).json()["id"]
                for n in "ab"
            ]
            receiver.wait_for(lambda got: len(got) == 2)
        engine = make_engine(settings.resolved_database_url)
        try:
            with Session(engine, expire_on_commit=False) as session:
                drive_job(session, jobs[0], JobState.SUCCEEDED, tmp_path / "a")
                drive_job(session, jobs[1], JobState.CANCELLED, tmp_path / "b")
        finally:
            engine.dispose()
        assert len(receiver.received) == 2
        with TestClient(create_app(opened), raise_server_exceptions=False) as second:
            receiver.wait_for(lambda got: len(got) == 17)
            time.sleep(0.5)  # anything more would be a duplicate: give it the time to show
            received = list(receiver.received)
            path = f"/v1/webhooks/{hook['id']}/deliveries"
            listed = send(second, "GET", path, ann).json()["items"]
    assert all(verify(hook["secret"], item) for item in received)
    assert len({item.delivery_id for item in received}) == len(received) == 17
    assert {d["status"] for d in listed} == {"delivered"} and len(listed) == 17
    middle = [("state", "starting"), ("state", "running"), ("checkpoint", 1), ("best", 1)]
    middle.append(("checkpoint", 2))
    assert expected_events(received, jobs[0]) == [
        ("state", "queued"),
        *middle,
        ("state", "succeeded"),
        ("terminal", "succeeded"),
    ]
    assert expected_events(received, jobs[1]) == [
        ("state", "queued"),
        *middle,
        ("state", "cancelling"),
        ("state", "cancelled"),
        ("terminal", "cancelled"),
    ]
    # A checkpoint comes as the listing showed it then: step 1 the best, step 2 only the latest.
    marks = {
        (item.payload["checkpoint"]["step"], item.payload["checkpoint"]["best"])
        for item in received
        if item.payload["type"] == "checkpoint" and item.payload["checkpoint"]["latest"]
    }
    assert marks == {(1, True), (2, False)}
