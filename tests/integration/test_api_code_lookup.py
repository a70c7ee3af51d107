"""`GET /v1/code/{code_id}` (and HEAD), which a client asks before uploading a directory, and
`GET /v1/limits`, by which it refuses a directory before sending it."""

import hashlib

from fastapi.testclient import TestClient

from service.settings import Settings
from tests.integration.test_api_jobs import assert_error_body

TRAIN = b"print('training')\n"
CODE_ID = hashlib.sha256(TRAIN).hexdigest()


def user(api: TestClient, name: str) -> dict[str, str]:
    created = api.post("/v1/tokens", json={"name": name, "role": "user"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


def send(api: TestClient, headers: dict[str, str] | None = None) -> None:
    files = {"file": ("train.py", TRAIN, "application/octet-stream")}
    assert api.post("/v1/code", files=files, headers=headers).status_code in (200, 201)


def test_only_the_uploader_learns_that_the_bytes_are_stored(api: TestClient) -> None:
    alice, bob = user(api, "alice"), user(api, "bob")
    send(api, alice)
    found = api.get(f"/v1/code/{CODE_ID}", headers=alice)
    assert found.status_code == 200
    assert found.json() == {"code_id": CODE_ID, "sha256": CODE_ID, "size": len(TRAIN)}
    # The same bytes, stored already, are no one else's: bob and the admin get 404.
    for headers in (bob, None):
        assert_error_body(api.get(f"/v1/code/{CODE_ID}", headers=headers), 404, "not_found")
    head = api.head(f"/v1/code/{CODE_ID}", headers=bob)
    assert (head.status_code, head.content) == (404, b"")
    send(api, bob)
    head = api.head(f"/v1/code/{CODE_ID}", headers=bob)
    assert (head.status_code, head.content) == (200, b"")
    for odd in ("0" * 64, "X" * 64, "a" * 5000, "..", "%00"):
        assert_error_body(api.get(f"/v1/code/{odd}", headers=alice), 404, "not_found")


def test_the_limits_are_the_settings(api: TestClient, settings: Settings) -> None:
    limits = api.get("/v1/limits")
    assert limits.status_code == 200
    assert limits.json() == {
        "max_upload_bytes": settings.max_upload_bytes,
        "max_code_files": settings.max_code_files,
        "max_code_unpacked_bytes": settings.max_code_unpacked_bytes,
    }
    assert_error_body(api.get("/v1/limits", headers={"Authorization": ""}), 401)
