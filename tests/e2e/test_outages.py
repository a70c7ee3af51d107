"""The real service over HTTP while the database is away (SQLite write-locked, PostgreSQL
stopped): every request on one kept-alive connection gets its answer, 503 naming the database
where it needs it; none is a 500 and no connection is reset (an exception raised out of the
app made the server close it, and the next request on it, or an upload still being sent,
met a reset)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_stack
from tests.support.outages import DatabaseOutage
from tests.support.stack import Stack

SPEC = {"name": "outage", "recipe": "synthetic"}
UPLOAD = {"file": ("train.py", b"# padding\n" * 200_000)}  # 2 MB: still being sent at the answer


@pytest.fixture
def stack(tmp_path: Path, database_outage: DatabaseOutage, redis_url: str) -> Iterator[Stack]:
    """The API alone (no worker needed), waiting 0.5 s for the database."""
    stack = make_stack(
        tmp_path / "stack",
        database_outage.url,
        redis_url,
        LAUNCHBAY_DATABASE_WAIT_S="0.5",
        LAUNCHBAY_REAPER_ENABLED="false",
    )
    try:
        stack.start_api()
        yield stack
    finally:
        stack.stop()


def test_every_request_is_answered_while_the_database_is_away(
    stack: Stack, database_outage: DatabaseOutage
) -> None:
    with stack.client() as http:
        job_id = http.post("/v1/jobs", json=SPEC).json()["id"]
        token = http.post("/v1/tokens", json={"name": "u", "role": "user"}).json()["token"]
        user = {"Authorization": f"Bearer {token}"}
        with database_outage.away():
            answers = {
                "job": http.get(f"/v1/jobs/{job_id}"),
                "submit": http.post("/v1/jobs", json=SPEC),
                "upload": http.post("/v1/code", files=UPLOAD),
                "user upload": http.post("/v1/code", files=UPLOAD, headers=user),
                "token": http.post("/v1/tokens", json={"name": "v", "role": "user"}),
                "list": http.get("/v1/jobs"),
                "ready": http.get("/v1/ready"),
            }
        assert http.get(f"/v1/jobs/{job_id}").status_code == 200  # back, same connection

    reads = {"job", "list"} if database_outage.kind == "sqlite" else set()
    for name, answer in answers.items():
        expected = 200 if name in reads else 503
        assert answer.status_code == expected, (name, answer.text)
        if expected == 503:
            assert answer.json()["error"]["code"] == "unavailable", (name, answer.text)
    assert "Exception in ASGI application" not in stack.api_log()
