"""The audit log: exactly one record per state-changing request, refused ones included (401,
403, 404, 413), none for reads; `GET /v1/audit` for admins, with filters; retention."""

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert
from sqlmodel import Session, col, func, select

from service.audit import AUDITED_METHODS
from service.db import make_engine
from service.models import AuditRecord, utcnow
from service.settings import Settings
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.test_api_jobs import SYNTHETIC, assert_error_body
from tests.integration.test_auth import fill, make_token, request_body, routes, send

# Each test on one database: what differs between them is the time comparisons (retention)
# and the insert, both covered on PostgreSQL; SQLite is the embedded default.
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
postgres_only = pytest.mark.parametrize("database_url", ["postgres"], indirect=True)


def records(settings: Settings) -> list[AuditRecord]:
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            return list(session.exec(select(AuditRecord).order_by(col(AuditRecord.id))).all())
    finally:
        engine.dispose()


def audited(
    api: TestClient, settings: Settings, method: str, url: str, token: str | None, **kw: Any
) -> tuple[Any, AuditRecord]:
    """Send one request; it must add exactly one record, which is returned."""
    before = len(records(settings))
    response = send(api, method, url, token, **kw)
    after = records(settings)
    assert len(after) == before + 1, (method, url, response.status_code, after[before:])
    return response, after[-1]


@sqlite_only
def test_every_state_changing_route_writes_exactly_one_record_refused_or_not(
    api: TestClient, settings: Settings
) -> None:
    alice = make_token(api, "alice")
    changing = [(m, t) for m, t in routes(api) if m in AUDITED_METHODS]
    assert len(changing) >= 10
    for method, template in changing:
        url = fill(template, job_id="0" * 32, name="nobody", webhook_id="w" * 8)
        body = request_body(method, template)
        for token, owner in ((None, None), ("lb_" + "A" * 43, None), (alice, "alice")):
            response, record = audited(api, settings, method, url, token, **body)
            assert (record.method, record.path, record.status) == (
                method,
                url,
                response.status_code,
            )
            assert record.owner == owner, (method, template)
            assert record.outcome == ("ok" if response.status_code < 400 else "refused")
            assert record.client == "testclient" and record.kind != "unknown"
    # A user at an admin route: refused with 403, recorded with who it was.
    response, record = audited(api, settings, "POST", "/v1/tokens", alice, json={"name": "x"})
    assert (response.status_code, record.kind, record.owner) == (403, "token.create", "alice")


@postgres_only
def test_each_record_names_who_what_target_and_outcome(api: TestClient, settings: Settings) -> None:
    bob = make_token(api, "bob")
    submitted, record = audited(api, settings, "POST", "/v1/jobs", bob, json=SYNTHETIC)
    job_id = submitted.json()["id"]
    assert (record.kind, record.owner, record.status, record.outcome) == (
        "job.submit",
        "bob",
        201,
        "ok",
    )
    _, record = audited(api, settings, "POST", f"/v1/jobs/{job_id}/cancel", bob)
    assert (record.kind, record.target, record.status) == ("job.cancel", job_id, 202)
    _, record = audited(api, settings, "DELETE", f"/v1/jobs/{job_id}", bob)
    assert (record.kind, record.target, record.status) == ("job.delete", job_id, 204)
    _, record = audited(api, settings, "DELETE", "/v1/tokens/bob", ADMIN_TOKEN)
    assert (record.kind, record.target, record.owner) == ("token.revoke", "bob", "admin")
    # Refused before any route runs: a body over the limit.
    huge = {
        "content": b"x" * (settings.max_body_bytes + 1),
        "headers": {"Content-Type": "application/json"},
    }
    response, record = audited(api, settings, "POST", "/v1/jobs", ADMIN_TOKEN, **huge)
    assert (response.status_code, record.status, record.outcome) == (413, 413, "refused")
    # Reads are not recorded.
    before = len(records(settings))
    for path in ("/v1/jobs", "/v1/audit", "/v1/webhooks", "/v1/health"):
        send(api, "GET", path, ADMIN_TOKEN)
    assert len(records(settings)) == before


@sqlite_only
def test_the_audit_log_is_for_admins_and_filters_by_owner_kind_and_time(
    api: TestClient,
) -> None:
    carol = make_token(api, "carol")
    send(api, "POST", "/v1/jobs", carol, json=SYNTHETIC)
    send(api, "POST", "/v1/jobs/nope/cancel", carol)
    assert_error_body(send(api, "GET", "/v1/audit", carol), 403, "forbidden")

    def listed(**params: Any) -> list[tuple[str | None, str, int]]:
        answer = api.get("/v1/audit", params=params)
        assert answer.status_code == 200, answer.text
        return [(r["owner"], r["kind"], r["status"]) for r in answer.json()["items"]]

    assert listed(owner="carol") == [("carol", "job.cancel", 404), ("carol", "job.submit", 201)]
    assert listed(owner="carol", kind="job.submit") == [("carol", "job.submit", 201)]
    assert listed(owner="carol", kind="job.") == listed(owner="carol")
    assert listed(kind="token.create") == [("admin", "token.create", 201)]
    future = (utcnow() + timedelta(minutes=5)).isoformat()
    assert listed(since=future) == [] and len(listed(until=future)) == 3
    assert_error_body(api.get("/v1/audit", params={"since": "yesterday"}), 422)
    assert_error_body(api.get("/v1/audit", params={"limit": 0}), 422)


@postgres_only
def test_records_older_than_the_retention_are_purged(api: TestClient, settings: Settings) -> None:
    engine = make_engine(settings.resolved_database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                insert(AuditRecord.__table__),  # type: ignore[attr-defined]
                [
                    {
                        "ts": utcnow() - timedelta(days=days),
                        "owner": "old",
                        "kind": "job.submit",
                        "method": "POST",
                        "path": "/v1/jobs",
                        "status": 201,
                        "outcome": "ok",
                    }
                    for days in (
                        settings.audit_retention_days + 1,
                        settings.audit_retention_days - 1,
                    )
                ],
            )
        make_token(api, "dave")  # the first write of the process purges
        with Session(engine) as session:
            kept = session.exec(
                select(func.count()).select_from(AuditRecord).where(AuditRecord.owner == "old")
            ).one()
    finally:
        engine.dispose()
    assert kept == 1
