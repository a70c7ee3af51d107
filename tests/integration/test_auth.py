"""Bearer tokens and ownership, on SQLite and PostgreSQL: every route of the app without a
token, with another owner's token and as the admin; revoked and expired tokens; secrets that
never leave the service."""

import hashlib
import logging
import re
import string
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import fastapi.routing
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlmodel import Session, col, select

from jobs.states import JobState
from service import records
from service.db import make_engine
from service.models import ApiToken, Job, utcnow
from service.settings import Settings
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.test_api_jobs import SYNTHETIC, assert_error_body

# What answers without a token: liveness, readiness, the API's own description, and the
# dashboard's page (static; it calls /v1 with the token its user pastes).
PUBLIC = {
    "/v1/health",
    "/v1/ready",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
    "/",
}
# What a user may call besides their jobs (a route added later is only checked to accept them).
USER_ROUTES = {"/v1/jobs", "/v1/code", "/v1/recipes", "/v1/workers", "/metrics"}
TOKEN_FORMAT = re.compile(r"^lb_[A-Za-z0-9_-]{43}$")
CHECKPOINT = b"checkpoint bytes" * 64


def send(api: TestClient, method: str, url: str, token: str | None, **kwargs: Any) -> Any:
    """A request with `token` as its only credential (none at all for None)."""
    request = api.build_request(method, url, **kwargs)
    request.headers.pop("authorization", None)
    if token is not None:
        request.headers["authorization"] = f"Bearer {token}"
    return api.send(request)


def make_token(api: TestClient, name: str, role: str = "user", **body: Any) -> str:
    response = send(
        api, "POST", "/v1/tokens", ADMIN_TOKEN, json={"name": name, "role": role, **body}
    )
    assert response.status_code == 201, response.text
    token: str = response.json()["token"]
    return token


def submit(api: TestClient, token: str, **spec: Any) -> dict[str, Any]:
    response = send(api, "POST", "/v1/jobs", token, json={**SYNTHETIC, **spec})
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


ARTIFACT = "report.txt"


def finished_job_with_outputs(api: TestClient, settings: Settings, token: str) -> str:
    """A job of `token`'s owner, cancelled after it logged, reported, saved a checkpoint and kept
    an artifact."""
    job_id = submit(api, token, name="owned")["id"]
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            for state in (JobState.STARTING, JobState.RUNNING):
                assert records.transition_job(session, job_id, state, attempt=1)
            records.append_log_lines(session, job_id, 1, [records.NewLogLine(0, time.time(), "hi")])
            point = records.NewMetricPoint(1, 0, "loss", 0.5, time.time())
            records.append_metric_points(session, job_id, 1, [point])
            folder = settings.checkpoints_dir / job_id
            folder.mkdir(parents=True)
            (folder / "step-1.pt").write_bytes(CHECKPOINT)
            artifacts = settings.data_dir / "artifacts" / job_id
            artifacts.mkdir(parents=True)
            (artifacts / ARTIFACT).write_text("accuracy 0.9\n")
            records.register_checkpoint(
                session,
                job_id,
                1,
                path=f"checkpoints/{job_id}/step-1.pt",
                step=1,
                epoch=0,
                metrics={"loss": 0.5},
                size=len(CHECKPOINT),
                sha256=hashlib.sha256(CHECKPOINT).hexdigest(),
            )
            for state in (JobState.CANCELLING, JobState.CANCELLED):
                assert records.transition_job(session, job_id, state, attempt=1)
    finally:
        engine.dispose()
    return job_id


def routes(api: TestClient) -> list[tuple[str, str]]:
    """Every (method, path template) the app serves, DELETEs last (they remove what they hit).

    FastAPI keeps an included router as one entry of `app.routes`; `iter_route_contexts`
    unfolds them where it exists (older versions list every route there directly).
    """
    unfold = getattr(fastapi.routing, "iter_route_contexts", lambda routes: routes)
    found: set[tuple[str, str]] = set()
    for route in unfold(api.app.routes):  # type: ignore[attr-defined]
        path, methods = getattr(route, "path", None), getattr(route, "methods", None) or ()
        if path is not None:
            found.update((method, path) for method in methods if method != "HEAD")
    return sorted(found, key=lambda r: (r[0] == "DELETE", r[1], r[0]))


class _Params(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "x"


def fill(template: str, **params: str) -> str:
    """The path with its parameters filled: the given ones, `latest` for a checkpoint ref and
    `x` for any other (a route added later still gets a path); a converter (`{path:path}`)
    is dropped."""
    plain = re.sub(r"\{(\w+):\w+\}", r"{\1}", template)
    return string.Formatter().vformat(plain, (), _Params(ref="latest", **params))


def request_body(method: str, template: str) -> dict[str, Any]:
    """A well-formed body for the routes that take one, so only the credential decides."""
    if (method, template) == ("POST", "/v1/jobs"):
        return {"json": SYNTHETIC}
    if (method, template) == ("POST", "/v1/tokens"):
        return {"json": {"name": f"t{time.monotonic_ns()}"}}
    if (method, template) == ("POST", "/v1/code"):
        return {"files": {"file": ("train.py", b"print('hi')\n", "text/x-python")}}
    return {}


@pytest.fixture
def bob(api: TestClient) -> str:
    return make_token(api, "bob")


@pytest.fixture
def alice(api: TestClient) -> str:
    return make_token(api, "alice")


@pytest.fixture
def bobs_job(api: TestClient, settings: Settings, bob: str) -> str:
    return finished_job_with_outputs(api, settings, bob)


def test_every_route_but_health_ready_and_docs_needs_a_token(api: TestClient) -> None:
    table = routes(api)
    templates = {template for _, template in table}
    assert {"/v1/health", "/v1/ready", "/openapi.json", "/docs"} <= templates
    assert {"/v1/jobs", "/v1/jobs/{job_id}", "/v1/tokens", "/v1/code", "/metrics"} <= templates
    guarded = [(m, t) for m, t in table if t not in PUBLIC]
    assert len(guarded) >= 14
    for method, template in guarded:
        url = fill(template, job_id="0" * 32, name="nobody")
        for token in (None, "lb_" + "A" * 43, ""):
            response = send(api, method, url, token, **request_body(method, template))
            assert_error_body(response, 401, "unauthorized")
            assert response.headers["www-authenticate"] == "Bearer", (method, template)
        basic = send(api, method, url, None, headers={"Authorization": f"Basic {ADMIN_TOKEN}"})
        assert_error_body(basic, 401, "unauthorized")
    for method, template in table:
        if template in PUBLIC:
            assert send(api, method, template, None).status_code == 200, template


def test_a_user_gets_404_for_anothers_job_on_every_job_route(
    api: TestClient, alice: str, bobs_job: str
) -> None:
    job_routes = [(m, t) for m, t in routes(api) if "{job_id}" in t]
    assert len(job_routes) >= 8
    for method, template in job_routes:
        theirs = send(api, method, fill(template, job_id=bobs_job), alice)
        error = assert_error_body(theirs, 404, "not_found")
        unknown = send(api, method, fill(template, job_id="f" * 32), alice)
        # Someone else's job reads exactly like one that does not exist.
        assert error["message"].replace(bobs_job, "ID") == assert_error_body(unknown, 404)[
            "message"
        ].replace("f" * 32, "ID")
    assert send(api, "GET", f"/v1/jobs/{bobs_job}", ADMIN_TOKEN).json()["state"] == "cancelled"


@pytest.mark.parametrize("who", ["owner", "admin"])
def test_the_owner_and_an_admin_may_use_every_job_route(
    api: TestClient, bob: str, bobs_job: str, who: str
) -> None:
    token = bob if who == "owner" else ADMIN_TOKEN
    for method, template in [(m, t) for m, t in routes(api) if "{job_id}" in t]:
        response = send(api, method, fill(template, job_id=bobs_job, path=ARTIFACT), token)
        if (method, template) == ("POST", "/v1/jobs/{job_id}/stacks"):
            # Allowed, and refused only because the job has no ranks left to look at.
            assert_error_body(response, 409, "invalid_transition")
            continue
        assert response.status_code < 300, (method, template, response.text)
        if template.endswith("/download"):
            assert response.content == CHECKPOINT
        if template.endswith("/events"):
            assert "event: checkpoint" in response.text and '"cancelled"' in response.text
    assert_error_body(send(api, "GET", f"/v1/jobs/{bobs_job}", token), 404)


def test_the_non_job_routes_as_a_user(api: TestClient, alice: str) -> None:
    for method, template in routes(api):
        if template in PUBLIC or "{job_id}" in template:
            continue
        response = send(
            api, method, fill(template, name="bob"), alice, **request_body(method, template)
        )
        if template.startswith("/v1/tokens"):
            assert_error_body(response, 403, "forbidden")
        elif template in USER_ROUTES:
            assert response.status_code < 300, (method, template, response.text)
        else:
            assert response.status_code != 401, (method, template)


def test_a_user_lists_only_their_own_jobs_and_an_admin_all(
    api: TestClient, alice: str, bob: str
) -> None:
    mine = {submit(api, alice, name=f"a{i}")["id"] for i in range(2)}
    theirs = submit(api, bob, name="b")["id"]
    for token, expected in ((alice, mine), (bob, {theirs}), (ADMIN_TOKEN, mine | {theirs})):
        listed = send(api, "GET", "/v1/jobs", token).json()
        assert {j["id"] for j in listed["items"]} == expected
        assert listed["total"] == len(expected)
    queued = send(api, "GET", "/v1/jobs", alice, params={"state": "queued", "limit": 1}).json()
    assert queued["total"] == 2 and queued["items"][0]["id"] in mine


def test_idempotency_keys_are_per_owner(api: TestClient, alice: str, bob: str) -> None:
    key = {"Idempotency-Key": "same-key"}
    first = send(api, "POST", "/v1/jobs", alice, json=SYNTHETIC, headers=key)
    other = send(api, "POST", "/v1/jobs", bob, json=SYNTHETIC, headers=key)
    assert (first.status_code, other.status_code) == (201, 201)
    assert first.json()["id"] != other.json()["id"]


def test_uploaded_code_runs_only_for_its_uploader_and_admins(
    api: TestClient, alice: str, bob: str
) -> None:
    files = {"file": ("train.py", b"print('alice')\n", "text/x-python")}
    code_id = send(api, "POST", "/v1/code", alice, files=files).json()["code_id"]
    spec = {"name": "c", "code": {"code_id": code_id, "entrypoint": "train.py"}}
    assert send(api, "POST", "/v1/jobs", alice, json=spec).status_code == 201
    error = assert_error_body(send(api, "POST", "/v1/jobs", bob, json=spec), 422)
    assert error["detail"][0]["loc"] == ["body", "code", "code_id"]
    assert send(api, "POST", "/v1/jobs", ADMIN_TOKEN, json=spec).status_code == 201


def test_tokens_are_random_hashed_listed_without_secrets_and_shown_once(
    api: TestClient, settings: Settings
) -> None:
    created = send(api, "POST", "/v1/tokens", ADMIN_TOKEN, json={"name": "ci", "role": "admin"})
    assert created.status_code == 201
    body = created.json()
    assert set(body) == {"name", "role", "token"} and body["role"] == "admin"
    token = body["token"]
    assert TOKEN_FORMAT.match(token)
    assert token != make_token(api, "ci2")

    listed = send(api, "GET", "/v1/tokens", token)
    assert listed.status_code == 200, "an admin token may manage tokens"
    assert token not in listed.text and "token" not in listed.json()["items"][0]
    assert [(t["name"], t["role"], t["active"]) for t in listed.json()["items"]] == [
        ("ci", "admin", True),
        ("ci2", "user", True),
    ]
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            row = session.exec(select(ApiToken).where(ApiToken.name == "ci")).one()
    finally:
        engine.dispose()
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in repr(row.model_dump())

    taken = send(api, "POST", "/v1/tokens", ADMIN_TOKEN, json={"name": "ci"})
    assert_error_body(taken, 409, "token_name_taken")
    reserved = send(api, "POST", "/v1/tokens", ADMIN_TOKEN, json={"name": "admin"})
    assert_error_body(reserved, 409, "reserved_name")
    for bad in (
        {"name": "../x"},
        {"name": ""},
        {"name": "x", "role": "root"},
        {"name": "x", "expires_at": "2001-01-01T00:00:00Z"},
        {"name": "x", "extra": 1},
    ):
        assert_error_body(send(api, "POST", "/v1/tokens", ADMIN_TOKEN, json=bad), 422)


def test_revoked_and_expired_tokens_are_unauthorized(api: TestClient, settings: Settings) -> None:
    revoked, expiring, later = (make_token(api, n) for n in ("revoked", "expiring", "later"))
    job_id = submit(api, revoked)["id"]
    assert send(api, "DELETE", "/v1/tokens/revoked", ADMIN_TOKEN).status_code == 204
    assert send(api, "DELETE", "/v1/tokens/revoked", ADMIN_TOKEN).status_code == 204
    assert_error_body(send(api, "DELETE", "/v1/tokens/nobody", ADMIN_TOKEN), 404, "not_found")
    assert_error_body(send(api, "DELETE", "/v1/tokens/admin", ADMIN_TOKEN), 409, "reserved_name")

    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            session.execute(
                update(ApiToken)
                .where(col(ApiToken.name) == "expiring")
                .values(expires_at=utcnow() - timedelta(seconds=1))
            )
            session.commit()
    finally:
        engine.dispose()
    for token, why in ((revoked, "revoked"), (expiring, "expired")):
        for method, url in (("GET", "/v1/jobs"), ("GET", f"/v1/jobs/{job_id}")):
            error = assert_error_body(send(api, method, url, token), 401, "unauthorized")
            assert why in error["message"] and token not in error["message"]
    assert send(api, "GET", "/v1/jobs", later).status_code == 200
    states = {t["name"]: t for t in send(api, "GET", "/v1/tokens", ADMIN_TOKEN).json()["items"]}
    assert states["revoked"]["revoked_at"] and not states["revoked"]["active"]
    assert not states["expiring"]["active"] and states["later"]["active"]
    # The job of a revoked token stays, for an admin to see.
    assert send(api, "GET", f"/v1/jobs/{job_id}", ADMIN_TOKEN).status_code == 200
    again = send(api, "POST", "/v1/tokens", ADMIN_TOKEN, json={"name": "revoked"})
    detail = assert_error_body(again, 409, "token_name_taken")["detail"]
    assert detail == {"name": "revoked", "revoked": True}


def test_a_token_with_a_future_expiry_works_until_then(api: TestClient) -> None:
    soon = (utcnow() + timedelta(hours=1)).isoformat()
    token = make_token(api, "soon", expires_at=soon)
    assert send(api, "GET", "/v1/jobs", token).status_code == 200
    listed = send(api, "GET", "/v1/tokens", ADMIN_TOKEN).json()["items"]
    assert listed[0]["expires_at"].startswith(soon[:19])


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG):
        yield caplog


def test_tokens_never_reach_logs_job_records_or_errors(
    api: TestClient, settings: Settings, all_logs: pytest.LogCaptureFixture
) -> None:
    token = make_token(api, "quiet")
    job = submit(api, token, name="quiet-job")
    send(api, "POST", f"/v1/jobs/{job['id']}/cancel", token)
    send(api, "GET", "/v1/jobs/nope", token)
    send(api, "POST", "/v1/jobs", token, json={"name": "bad", "recipe": "nope"})
    send(api, "DELETE", "/v1/tokens/quiet", ADMIN_TOKEN)
    refused = send(api, "GET", "/v1/jobs", token)
    assert refused.status_code == 401 and token not in refused.text
    assert "quiet" in all_logs.text, "the API logs token names"
    for secret in (token, ADMIN_TOKEN):
        assert secret not in all_logs.text
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            row = session.exec(select(Job).where(Job.id == job["id"])).one()
    finally:
        engine.dispose()
    assert row.owner == "quiet"
    assert token not in repr(row.model_dump())
    assert ADMIN_TOKEN not in repr(settings)
