"""Answers a person reads every day: validation errors one per line with a did-you-mean, a
name filter that finds by part of the name, usage that says when it is not recorded, the
caller's code uploads listed; on SQLite and PostgreSQL."""

from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import Settings
from tests.integration.conftest import ADMIN

SYNTHETIC = {"name": "people", "recipe": "synthetic"}


def test_an_unknown_field_names_the_field_it_is_close_to(api: TestClient) -> None:
    answer = api.post("/v1/jobs", json={**SYNTHETIC, "nproc_per_nodes": 2})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["message"] == (
        "invalid request: nproc_per_nodes: unknown field (did you mean nproc_per_node?)"
    )
    assert error["detail"][0]["did_you_mean"] == "nproc_per_node"
    assert error["detail"][0]["type"] == "extra_forbidden"
    # Nested models are known too; a name close to nothing gets no guess.
    spec = {**SYNTHETIC, "checkpoint": {"every_step": 5}, "zzzzzz": 1, "nproc_per_node": 0}
    error = api.post("/v1/jobs", json=spec).json()["error"]
    lines = error["message"].splitlines()
    assert lines[0] == "invalid request (3 problems):"
    assert "  checkpoint.every_step: unknown field (did you mean every_steps?)" in lines
    assert "  zzzzzz: unknown field" in lines
    assert any(line.startswith("  nproc_per_node: ") for line in lines)
    # The dry run validates the same body, and says the same.
    dry = api.post("/v1/dry-run", json={**SYNTHETIC, "nproc_per_nodes": 2}).json()["error"]
    assert "did you mean nproc_per_node?" in dry["message"]


def test_name_contains_finds_jobs_by_part_of_their_name(api: TestClient) -> None:
    for name in ("digits-ddp", "Digits-big", "text-small", "50%_off"):
        assert api.post("/v1/jobs", json={**SYNTHETIC, "name": name}).status_code == 201

    def names(**query: str) -> list[str]:
        body = api.get("/v1/jobs", params=query).json()
        assert body["total"] == len(body["items"])
        return sorted(job["name"] for job in body["items"])

    assert names(name_contains="digits") == ["Digits-big", "digits-ddp"]
    assert names(name="digits") == []  # `name` stays an exact match
    # LIKE's wildcards are plain characters.
    assert names(name_contains="%_") == ["50%_off"]
    assert names(name_contains="_") == ["50%_off"]


def test_usage_says_whether_it_is_recorded(settings: Settings) -> None:
    for scheduler, recorded in (("fifo", False), ("dispatcher", True)):
        app = create_app(replace_settings(settings, scheduler=scheduler))
        with TestClient(app, raise_server_exceptions=False, headers=ADMIN) as api:
            body = api.get("/v1/usage").json()
        assert (body["items"], body["recorded"]) == ([], recorded), scheduler


def replace_settings(settings: Settings, **changes: object) -> Settings:
    return settings.model_copy(update=changes)


def test_code_list_shows_the_callers_uploads(api: TestClient) -> None:
    assert api.get("/v1/code").json() == {"items": []}
    content = b"print('hi')\n"
    uploaded = api.post("/v1/code", files={"file": ("train.py", content, "text/x-python")})
    assert uploaded.status_code == 201, uploaded.text
    code_id = uploaded.json()["code_id"]
    spec = {**SYNTHETIC, "recipe": None, "code": {"code_id": code_id, "entrypoint": "train.py"}}
    assert api.post("/v1/jobs", json=spec).status_code == 201
    [item] = api.get("/v1/code").json()["items"]
    assert item["code_id"] == code_id and item["filename"] == "train.py"
    assert item["size"] == len(content) and item["in_use"] is True
    # Another owner's list is their own.
    created = api.post("/v1/tokens", json={"name": "other", "role": "user"}).json()
    other = {"Authorization": f"Bearer {created['token']}"}
    assert api.get("/v1/code", headers=other).json() == {"items": []}
