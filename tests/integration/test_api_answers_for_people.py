"""Answers a person reads every day: validation errors one per line with a did-you-mean, a
name filter that finds by part of the name, the
caller's code uploads listed; on SQLite and PostgreSQL."""

from fastapi.testclient import TestClient

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
