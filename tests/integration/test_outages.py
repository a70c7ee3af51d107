"""The API while a dependency is away, in-process over a real database and a real Redis:
readiness says the database cannot be written, every route answers 503 `unavailable` naming
the dependency (never 500) within the time a request waits for the database, and the audit
log does not wait for the database a second time.

The database goes away as `tests.support.outages.DatabaseOutage` takes it: SQLite write-locked
by another connection (reads still work), PostgreSQL stopped (a private cluster)."""

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from service.app import create_app
from service.db import make_engine, upgrade_database
from service.outages import outage_of
from service.readiness import WRITE_CHECK_EVERY_S
from service.settings import Settings
from tests.integration.conftest import ADMIN, ADMIN_TOKEN
from tests.integration.test_api_jobs import assert_error_body
from tests.support.outages import DatabaseOutage
from tests.support.procs import free_port

# How long a request waits for the database here (Settings.database_wait_s), and the most an
# answer may take beyond it on a busy machine.
WAIT_S = 0.3
SLACK_S = 2.5
SPEC = {"name": "outage", "recipe": "synthetic"}


@pytest.fixture
def database_url(database_outage: DatabaseOutage) -> str:
    return database_outage.url


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # Nothing else of the app writes: what is measured is the requests' own.
    return settings.model_copy(
        update={
            "database_wait_s": WAIT_S,
            "reaper_enabled": False,
            "webhook_delivery_enabled": False,
        }
    )


@contextmanager
def unwritable(outage: DatabaseOutage) -> Iterator[None]:
    """SQLite write-locked; PostgreSQL read-only (as a standby is), for new connections and,
    once the old ones are ended, for the app's pool."""
    if outage.kind == "sqlite":
        with outage.away():
            yield
        return
    name = make_url(outage.url).database
    server = outage.url.replace("postgresql+psycopg://", "postgresql://").rsplit("/", 1)[0]

    def read_only(on: bool) -> None:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            setting = "SET default_transaction_read_only = on" if on else "RESET ALL"
            conn.execute(f'ALTER DATABASE "{name}" {setting}')
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )

    read_only(True)
    try:
        yield
    finally:
        read_only(False)


def timed(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    started = time.monotonic()
    answer = call(*args, **kwargs)
    return answer, time.monotonic() - started


def assert_unavailable(response: Any, dependency: str, reason: str | None = None) -> None:
    error = assert_error_body(response, 503, "unavailable")
    assert error["detail"]["dependency"] == dependency, error
    if reason is not None:
        assert error["detail"]["reason"] == reason, error
    assert dependency in error["message"].lower()
    assert response.headers["Retry-After"].isdigit()


# Readiness.


def test_ready_reports_a_database_that_cannot_be_written(
    api: TestClient, database_outage: DatabaseOutage
) -> None:
    assert api.get("/v1/ready").status_code == 200
    with unwritable(database_outage):
        time.sleep(WRITE_CHECK_EVERY_S)  # past the answer the last check shares
        response, took = timed(api.get, "/v1/ready")
        error = assert_error_body(response, 503, "unavailable")
        reason = "locked" if database_outage.kind == "sqlite" else "read_only"
        assert error["detail"] == {"database": f"error: {reason}", "redis": "ok"}
        assert error["message"] == f"not ready: database ({reason})"
        assert took < WAIT_S + SLACK_S
    time.sleep(WRITE_CHECK_EVERY_S)
    assert api.get("/v1/ready").json() == {
        "status": "ready",
        "checks": {"database": "ok", "redis": "ok"},
    }


def test_ready_writes_to_the_database_once_a_second_at_most(
    api: TestClient, settings: Settings
) -> None:
    engine = make_engine(settings.resolved_database_url)

    def writes() -> int:
        with engine.connect() as connection:
            return int(connection.execute(text("SELECT writes FROM write_check")).scalar_one())

    try:
        before = writes()
        answers = [api.get("/v1/ready").status_code for _ in range(5)]
        assert answers == [200] * 5
        assert writes() - before == 1
    finally:
        engine.dispose()


# Every route while the database is away.


def sweep(api: TestClient, job_id: str) -> dict[str, Any]:
    """One request to every operation of the API (valid ones where a body is needed, about
    the job `job_id`): {"METHOD /path": response}."""
    values = {
        "job_id": job_id,
        "ref": "latest",
        "path": "out.txt",
        "code_id": "0" * 64,
        "name": "someone",
        "owner": "someone",
        "webhook_id": "1",
        "delivery_id": "1",
    }
    bodies: dict[str, dict[str, Any]] = {
        "POST /v1/jobs": {"json": SPEC},
        "POST /v1/dry-run": {"json": SPEC},
        "POST /v1/tokens": {"json": {"name": "someone", "role": "user"}},
        "POST /v1/webhooks": {"json": {"url": "https://93.184.215.14/hook", "events": ["state"]}},
        "PUT /v1/policies/{owner}": {"json": {"weight": 2.0}},
        "POST /v1/code": {"files": {"file": ("train.py", b"print(1)\n")}},
        "GET /v1/logs": {"params": {"q": "x"}},
    }
    answers = {}
    for template, item in api.app.openapi()["paths"].items():  # type: ignore[attr-defined]
        path = template.format(**values)
        for method in item:
            operation = f"{method.upper()} {template}"
            answers[operation] = api.request(method.upper(), path, **bodies.get(operation, {}))
    return answers


# What answers without the database: liveness, the built-in recipes, a dry run of a spec.
NEEDS_NO_DATABASE = {"GET /v1/health", "GET /v1/limits", "GET /v1/recipes", "POST /v1/dry-run"}
# What writes to the database in `sweep` (others are refused before they would: 404, 409).
WRITES = {
    "POST /v1/jobs",
    "DELETE /v1/jobs/{job_id}",
    "POST /v1/jobs/{job_id}/stacks",
    "POST /v1/code",
    "POST /v1/tokens",
    "POST /v1/webhooks",
    "PUT /v1/policies/{owner}",
}


def test_every_route_answers_503_naming_the_database_while_it_is_away(
    api: TestClient, database_outage: DatabaseOutage
) -> None:
    job_id = api.post("/v1/jobs", json=SPEC).json()["id"]
    assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 202  # its event stream ends
    with database_outage.away():
        answers, took = timed(sweep, api, job_id)
    failed = {op: r.status_code for op, r in answers.items() if r.status_code >= 500}
    unavailable = {op for op, r in answers.items() if r.status_code == 503}
    for operation in unavailable - {"GET /v1/ready"}:
        if operation.startswith("HEAD"):  # no body
            assert answers[operation].headers["Retry-After"].isdigit()
        else:
            assert_unavailable(answers[operation], "database")
    assert answers["GET /v1/ready"].json()["error"]["detail"]["database"].startswith("error")
    assert set(failed) == unavailable, failed  # no 500
    if database_outage.kind == "postgres":
        assert set(answers) - unavailable == NEEDS_NO_DATABASE
    else:  # reads go on; what writes waits WAIT_S, then 503
        assert WRITES <= unavailable
        assert {op for op in unavailable if op.startswith("GET")} == {"GET /v1/ready"}
    assert took < len(answers) * (WAIT_S + 0.2) + SLACK_S


def test_a_submission_waits_for_a_locked_database_only_briefly(
    api: TestClient, database_outage: DatabaseOutage, caplog: pytest.LogCaptureFixture
) -> None:
    """POST /v1/jobs and /v1/tokens, which waited 60 s and answered 500: 503 after WAIT_S,
    and their audit records go to the log instead of waiting for the database again."""
    caplog.set_level(logging.WARNING, logger="launchbay.audit")
    with database_outage.away():
        submitted, took_job = timed(api.post, "/v1/jobs", json=SPEC)
        token, took_token = timed(api.post, "/v1/tokens", json={"name": "u", "role": "user"})
    reason = "locked" if database_outage.kind == "sqlite" else "unreachable"
    assert_unavailable(submitted, "database", reason)
    assert_unavailable(token, "database", reason)
    assert max(took_job, took_token) < WAIT_S + SLACK_S
    logged = [r.getMessage() for r in caplog.records if "audit record not written" in r.message]
    assert len(logged) == 2 and "'kind': 'job.submit'" in logged[0], logged
    # Back: the same requests go through, and are audited.
    assert api.post("/v1/jobs", json=SPEC).status_code == 201
    kinds = [r["kind"] for r in api.get("/v1/audit").json()["items"]]
    assert kinds.count("job.submit") == 1


def test_a_user_token_meets_the_outage_at_authentication(
    api: TestClient, database_outage: DatabaseOutage
) -> None:
    token = api.post("/v1/tokens", json={"name": "u", "role": "user"}).json()["token"]
    user = {"Authorization": f"Bearer {token}"}
    with database_outage.away():
        answer = api.get("/v1/jobs", headers=user)
    if database_outage.kind == "postgres":
        assert_unavailable(answer, "database", "unreachable")
    else:
        assert answer.status_code == 200  # reads go on


# Redis away.


def test_no_route_answers_500_while_redis_is_away(tmp_path: Path, sqlite_url: str) -> None:
    upgrade_database(sqlite_url)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=sqlite_url,
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        admin_token=ADMIN_TOKEN,
        reaper_enabled=False,
    )
    with TestClient(create_app(settings), headers=ADMIN) as api:
        job_id = api.post("/v1/jobs", json=SPEC).json()["error"]["detail"]["job_id"]
        assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        answers = sweep(api, job_id)
    failed = {op: r.status_code for op, r in answers.items() if r.status_code >= 500}
    assert set(failed) == {"GET /v1/ready", "POST /v1/jobs", "GET /v1/workers"}, failed
    assert_error_body(answers["POST /v1/jobs"], 503, "queue_unavailable")  # the job is kept
    assert_unavailable(answers["GET /v1/workers"], "redis", "unreachable")
    ready = assert_error_body(answers["GET /v1/ready"], 503, "unavailable")
    assert ready["detail"] == {"database": "ok", "redis": "error: unreachable"}


# The reasons, from the drivers' own errors.


def test_outages_are_told_apart_from_the_drivers_errors(sqlite_url: str) -> None:
    def reason_of(statement: str, *setup: str, url: str = sqlite_url) -> str:
        engine = create_engine(url)
        try:
            with engine.begin() as connection:
                for step in (*setup, statement):
                    connection.exec_driver_sql(step)
        except DBAPIError as exc:
            outage = outage_of(exc)
            return "not an outage" if outage is None else outage.reason
        finally:
            engine.dispose()
        raise AssertionError("no error")

    make_engine(sqlite_url).dispose()  # makes the file's folder
    create = "CREATE TABLE IF NOT EXISTS t (x BLOB)"
    assert reason_of(create, "PRAGMA query_only = ON") == "read_only"
    filler = "INSERT INTO t VALUES (zeroblob(100000))"
    assert reason_of(filler, create, "PRAGMA max_page_count = 4") == "full"
    # A statement that is wrong is a bug (500), not an outage.
    assert reason_of("SELECT * FROM no_such_table") == "not an outage"
    closed = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/x"
    assert reason_of("SELECT 1", url=closed) == "unreachable"
