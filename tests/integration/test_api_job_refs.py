"""Every `/v1/jobs/{id}...` route takes a job ref (`service.job_refs`): a whole id, a unique
prefix, a name, `name@N`; on SQLite and PostgreSQL, limited to the caller's jobs."""

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.spec import JobSpec
from jobs.states import JobState
from service.models import Job

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _token(api: TestClient, name: str) -> dict[str, str]:
    created = api.post("/v1/tokens", json={"name": name, "role": "user"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


def _job(engine: Engine, job_id: str, name: str, owner: str, minutes: int = 0) -> str:
    """A job row with the id and creation time a test needs (never run)."""
    spec = JobSpec.model_validate({"name": name, "recipe": "synthetic"})
    with Session(engine) as session:
        session.add(
            Job(
                id=job_id,
                name=name,
                owner=owner,
                state=JobState.QUEUED,
                spec=spec.model_dump(mode="json"),
                queue="default",
                created_at=T0 + timedelta(minutes=minutes),
            )
        )
        session.commit()
    return job_id


def _get(api: TestClient, ref: str, who: dict[str, str] | None = None) -> tuple[int, dict]:
    answer = api.get(f"/v1/jobs/{ref}", headers=who or {})
    return answer.status_code, answer.json()


def test_a_unique_prefix_or_name_is_the_job_on_every_route(api: TestClient, engine: Engine) -> None:
    alice = _token(api, "alice")
    job_id = _job(engine, "4ca2" + "0" * 28, "digits-ddp", "alice")
    for ref in ("4ca2", "4CA2", "4ca20000", "digits-ddp", "digits-ddp@1", job_id):
        status, body = _get(api, ref, alice)
        assert (status, body.get("id")) == (200, job_id), (ref, body)
    assert api.get("/v1/jobs/4ca2/metrics", headers=alice).status_code == 200
    assert api.get("/v1/jobs/digits-ddp/logs", headers=alice).status_code == 200
    assert api.get("/v1/jobs/4ca2/checkpoints", headers=alice).status_code == 200
    cancelled = api.post("/v1/jobs/digits-ddp@1/cancel", headers=alice)
    assert (cancelled.status_code, cancelled.json()["state"]) == (202, "cancelled")
    # Shorter than 4 characters, a prefix is no handle.
    status, body = _get(api, "4ca", alice)
    assert (status, body["error"]["code"]) == (404, "not_found")


def test_an_ambiguous_ref_is_409_with_the_candidates(api: TestClient, engine: Engine) -> None:
    first = _job(engine, "abcd1" + "0" * 27, "sweep", "admin", minutes=1)
    second = _job(engine, "abcd2" + "0" * 27, "sweep", "admin", minutes=2)
    for ref in ("abcd", "sweep"):
        status, body = _get(api, ref)
        assert status == 409, body
        error = body["error"]
        assert error["code"] == "ambiguous_id"
        assert [c["id"] for c in error["detail"]["candidates"]] == [second, first]
        candidate = error["detail"]["candidates"][0]
        assert set(candidate) == {"id", "name", "state", "created_at"}
        assert candidate["name"] == "sweep" and candidate["state"] == "queued"
    # A longer prefix, or name@N, picks one.
    assert _get(api, "abcd1")[1]["id"] == first
    assert _get(api, "sweep@1")[1]["id"] == second
    assert _get(api, "sweep@2")[1]["id"] == first
    assert _get(api, "sweep@3")[0] == 404
    # @N alone: the caller's Nth newest job.
    assert _get(api, "@1")[1]["id"] == second


def test_refs_never_reach_another_owners_job(api: TestClient, engine: Engine) -> None:
    alice, bob = _token(api, "alice"), _token(api, "bob")
    mine = _job(engine, "beef1" + "0" * 27, "shared-name", "alice", minutes=1)
    _job(engine, "beef2" + "0" * 27, "shared-name", "bob", minutes=2)
    # Bob's job with the same prefix and name is no candidate for Alice: hers is unique.
    for ref in ("beef", "shared-name", "shared-name@1", "@1"):
        assert _get(api, ref, alice)[1].get("id") == mine, ref
    assert _get(api, "shared-name@2", alice)[0] == 404
    # Alice's whole id is not found for Bob, as it always was.
    assert _get(api, mine, bob)[1]["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("ref", "status"),
    [
        ("x" * 10_000, 404),
        ("%", 404),
        ("____", 404),
        ("ab%d", 404),
        ("a_cd", 404),
        ("x@-1", 400),
        ("x@0", 400),
        ("x@99999999999999999999", 400),
        ("@0", 400),
        ("zzzz", 404),
    ],
)
def test_hostile_refs_are_a_clear_4xx(
    api: TestClient, engine: Engine, ref: str, status: int
) -> None:
    _job(engine, "abcd" + "0" * 28, "victim", "someone-else")
    answer = api.get(f"/v1/jobs/{ref}", headers=_token(api, "mallory"))
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["code"] == ("not_found" if status == 404 else "bad_request")
    assert len(error["message"]) < 300
    # The same as the admin: LIKE's wildcards match nothing, the job is not found.
    assert api.get(f"/v1/jobs/{ref}").status_code == status
