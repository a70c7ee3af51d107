"""`GET /v1/jobs` filtered by name, tag and owner, on SQLite and PostgreSQL."""

from typing import Any

from fastapi.testclient import TestClient


def _token(api: TestClient, name: str) -> dict[str, str]:
    created = api.post("/v1/tokens", json={"name": name, "role": "user"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


def _submit(api: TestClient, who: dict[str, str], name: str, **tags: str) -> str:
    spec = {"name": name, "recipe": "synthetic", "tags": tags}
    answer = api.post("/v1/jobs", json=spec, headers=who)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def _ids(api: TestClient, headers: dict[str, str] | None = None, **query: Any) -> list[str]:
    answer = api.get("/v1/jobs", params=query, headers=headers or {})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total"] == len(body["items"])
    return [job["id"] for job in body["items"]]


def test_jobs_filter_by_name_tag_and_owner(api: TestClient) -> None:
    alice, bob = _token(api, "alice"), _token(api, "bob")
    a1 = _submit(api, alice, "resnet", team="vision", size="s")
    a2 = _submit(api, alice, "bert", team="text")
    b1 = _submit(api, bob, "resnet", team="vision", size="l")
    hostile = _submit(api, bob, "x'; DROP TABLE job; --", team="it's")

    assert _ids(api, name="resnet") == [b1, a1]
    assert _ids(api, tag="team=vision") == [b1, a1]
    assert _ids(api, tag=["team=vision", "size=l"]) == [b1]
    assert _ids(api, tag="team=it's") == [hostile]
    assert _ids(api, name="x'; DROP TABLE job; --") == [hostile]
    assert _ids(api, tag="nope=1") == []
    assert _ids(api, name="resnet", owner="alice") == [a1]
    assert _ids(api, owner="bob", tag="team=vision") == [b1]
    assert _ids(api, owner="bob") == [hostile, b1]
    # Paged: the total counts every match.
    page = api.get("/v1/jobs", params={"tag": "team=vision", "limit": 1}).json()
    assert (page["total"], [j["id"] for j in page["items"]]) == (2, [b1])

    # A user sees only their own jobs, filtered or not, and may not ask for another's.
    assert _ids(api, alice, name="resnet") == [a1]
    assert _ids(api, alice, tag="team=text") == [a2]
    assert _ids(api, alice, owner="alice") == [a2, a1]
    refused = api.get("/v1/jobs", params={"owner": "bob"}, headers=alice)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"


def test_a_tag_that_is_not_key_value_is_refused(api: TestClient) -> None:
    answer = api.get("/v1/jobs", params={"tag": "novalue"})
    assert answer.status_code == 400
    assert answer.json()["error"]["detail"] == {"tag": "novalue"}
