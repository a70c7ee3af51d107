"""What uploads may take and how they are taken back, on SQLite and PostgreSQL with real Redis:
`DELETE /v1/code/{code_id}`, the per-owner quotas on uploaded and unpacked bytes, and the
per-owner upload rate."""

import io
import zipfile
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from service.db import make_engine
from service.models import CodeUpload, Job
from service.settings import Settings
from tests.integration.test_api_jobs import assert_error_body
from tests.integration.test_auth import make_token, send

QUOTA = 8 * 1024
UNPACKED_QUOTA = 64 * 1024
PER_MINUTE = 4


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "code_quota_bytes": QUOTA,
            "code_quota_unpacked_bytes": UNPACKED_QUOTA,
            "uploads_per_minute": 1000,
        }
    )


@pytest.fixture
def alice(api: TestClient) -> str:
    return make_token(api, "alice")


@pytest.fixture
def bob(api: TestClient) -> str:
    return make_token(api, "bob")


def script(n: int, size: int = 100) -> bytes:
    """A distinct script of about `size` bytes."""
    return f"print({n})\n".encode().ljust(size, b"#")


def zeros_zip(n: int, unpacked: int) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("train.py", f"print({n})\n")
        zf.writestr("zeros.bin", b"\0" * unpacked)
    return buffer.getvalue()


def upload(api: TestClient, token: str, name: str, content: bytes) -> Any:
    files = {"file": (name, content, "application/octet-stream")}
    return send(api, "POST", "/v1/code", token, files=files)


def delete(api: TestClient, token: str, code_id: str) -> Any:
    return send(api, "DELETE", f"/v1/code/{code_id}", token)


def submit(api: TestClient, token: str, code_id: str) -> Any:
    spec = {"name": "uses-code", "code": {"code_id": code_id, "entrypoint": "train.py"}}
    return send(api, "POST", "/v1/jobs", token, json=spec)


def stored(settings: Settings) -> list[str]:
    """What the code dir holds, temporary names included."""
    return sorted(p.name for p in settings.code_dir.iterdir())


def rows(settings: Settings) -> list[tuple[str, str, int, int]]:
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            found = session.exec(select(CodeUpload)).all()
            return sorted((r.code_id, r.owner, r.size, r.unpacked_size) for r in found)
    finally:
        engine.dispose()


def set_state(engine: Any, job_id: str, state: str) -> None:
    with Session(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        job.state = state
        session.add(job)
        session.commit()


def test_deleting_code_removes_its_record_and_files(
    api: TestClient, settings: Settings, alice: str
) -> None:
    code_id = upload(api, alice, "train.py", script(1)).json()["code_id"]
    assert stored(settings) == [code_id]
    answer = delete(api, alice, code_id)
    assert answer.status_code == 204, answer.text
    assert stored(settings) == [] and rows(settings) == []
    assert_error_body(submit(api, alice, code_id), 422, "validation_error")
    assert_error_body(delete(api, alice, code_id), 404, "not_found")


def test_another_owners_code_is_not_found_and_shared_bytes_stay_for_their_other_owner(
    api: TestClient, settings: Settings, alice: str, bob: str
) -> None:
    code_id = upload(api, bob, "train.py", script(2)).json()["code_id"]
    assert_error_body(delete(api, alice, code_id), 404, "not_found")
    assert stored(settings) == [code_id]
    assert upload(api, alice, "train.py", script(2)).status_code == 201
    assert delete(api, alice, code_id).status_code == 204
    assert stored(settings) == [code_id]
    assert [r[1] for r in rows(settings)] == ["bob"]
    assert submit(api, bob, code_id).status_code == 201
    # An admin deletes every owner's record, and the files.
    code_2 = upload(api, bob, "train.py", script(3)).json()["code_id"]
    assert send(api, "DELETE", f"/v1/code/{code_2}", None).status_code == 401
    assert delete(api, settings.admin_token or "", code_2).status_code == 204
    assert code_2 not in stored(settings)


@pytest.mark.parametrize("state", ["queued", "starting", "running", "cancelling"])
def test_code_an_unfinished_job_runs_is_not_deleted(
    api: TestClient, settings: Settings, engine: Any, alice: str, bob: str, state: str
) -> None:
    code_id = upload(api, alice, "train.py", script(4)).json()["code_id"]
    job_id = submit(api, alice, code_id).json()["id"]
    set_state(engine, job_id, state)
    error = assert_error_body(delete(api, alice, code_id), 409, "code_in_use")
    assert error["detail"] == {"jobs": [job_id]}
    assert stored(settings) == [code_id] and len(rows(settings)) == 1
    # Bob's job on the same bytes does not keep Alice's record, but keeps the files.
    set_state(engine, job_id, "cancelled")
    upload(api, bob, "train.py", script(4))
    bobs_job = submit(api, bob, code_id).json()["id"]
    assert delete(api, alice, code_id).status_code == 204
    assert stored(settings) == [code_id]
    assert_error_body(delete(api, bob, code_id), 409, "code_in_use")
    set_state(engine, bobs_job, "succeeded")
    assert delete(api, bob, code_id).status_code == 204
    assert stored(settings) == []


def test_an_upload_past_the_owners_quota_is_refused_and_stores_nothing(
    api: TestClient, settings: Settings, alice: str, bob: str
) -> None:
    first = upload(api, alice, "a.py", script(5, QUOTA - 1000))
    assert first.status_code == 201
    before = (stored(settings), rows(settings))
    over = upload(api, alice, "b.py", script(6, 2000))
    error = assert_error_body(over, 413, "quota_exceeded")
    assert error["detail"]["left_bytes"] == 1000
    assert (stored(settings), rows(settings)) == before
    # The same upload again costs nothing; another owner has a quota of their own.
    assert upload(api, alice, "a.py", script(5, QUOTA - 1000)).status_code == 200
    assert upload(api, bob, "b.py", script(6, 2000)).status_code == 201
    # Deleting frees the room.
    assert delete(api, alice, first.json()["code_id"]).status_code == 204
    assert upload(api, alice, "b.py", script(6, 2000)).status_code == 201


def test_uploads_that_unpack_past_the_owners_quota_are_refused_and_store_nothing(
    api: TestClient, settings: Settings, alice: str
) -> None:
    big = UNPACKED_QUOTA // 2 + 1024
    first = upload(api, alice, "one.zip", zeros_zip(1, big))
    assert first.status_code == 201, first.text
    assert rows(settings)[0][3] == big + len("print(1)\n")
    before = (stored(settings), rows(settings))
    over = upload(api, alice, "two.zip", zeros_zip(2, big))
    assert_error_body(over, 413, "quota_exceeded")
    assert (stored(settings), rows(settings)) == before
    assert delete(api, alice, first.json()["code_id"]).status_code == 204
    assert upload(api, alice, "two.zip", zeros_zip(2, big)).status_code == 201


def test_uploads_are_rate_limited_per_owner(
    api: TestClient, settings: Settings, alice: str, bob: str
) -> None:
    limited_settings = settings.model_copy(update={"uploads_per_minute": PER_MINUTE})
    api.app.state.settings = limited_settings  # type: ignore[attr-defined]
    answers = [upload(api, alice, "t.py", script(100 + i)) for i in range(3 * PER_MINUTE)]
    accepted = [a for a in answers if a.status_code == 201]
    limited = [a for a in answers if a.status_code == 429]
    # Fixed one-minute windows: a burst that straddles a boundary gets one more window, of
    # which it may use only part (the boundary came late in the burst: fewer uploads were left).
    assert PER_MINUTE <= len(accepted) <= 2 * PER_MINUTE
    assert len(accepted) + len(limited) == len(answers)
    for answer in limited:
        error = assert_error_body(answer, 429, "rate_limited")
        assert 1 <= int(answer.headers["retry-after"]) <= 60
        assert error["detail"]["limit_per_minute"] == PER_MINUTE
    assert len(stored(settings)) == len(accepted)
    assert upload(api, bob, "t.py", script(999)).status_code == 201


def test_a_delete_of_an_odd_code_id_is_not_found(api: TestClient, alice: str) -> None:
    for code_id in ("nope", "x" * 64, "%00", "a" * 65, "A" * 64):
        assert_error_body(delete(api, alice, code_id), 404, "not_found")
