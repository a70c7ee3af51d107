"""Log search: a job's lines (`GET /v1/jobs/{id}/logs?q=&regex=`) and an owner's
(`GET /v1/logs?q=&since=`), exact on SQLite and PostgreSQL, time-bounded, refusing costly
patterns; on PostgreSQL the trigram index serves it."""

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session, select

from jobs.states import JobState
from service import records
from service.app import create_app
from service.db import make_engine
from service.models import LogLine
from service.records.log_search import check_query, line_matches
from service.settings import Settings
from tests.integration.conftest import ADMIN
from tests.integration.test_api_jobs import SYNTHETIC, assert_error_body
from tests.integration.test_auth import make_token, send

LINES = [
    (0, "step 1 loss=0.5312 lr=0.001"),
    (1, "step 1 loss=0.5410 lr=0.001"),
    (0, "100% of the data loaded"),
    (1, "a_b is a name, axb is not"),
    (0, "ERROR: NCCL watchdog timeout"),
    (1, "error: lower case"),
    (0, "naïve unicode ✓ line"),
    (1, "100 percent"),
]


def add_job(api: TestClient, settings: Settings, token: str, lines: list[tuple[int, str]]) -> str:
    job_id: str = send(api, "POST", "/v1/jobs", token, json=SYNTHETIC).json()["id"]
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            for state in (JobState.STARTING, JobState.RUNNING):
                assert records.transition_job(session, job_id, state, attempt=1)
            now = time.time()
            batch = [records.NewLogLine(rank, now, line) for rank, line in lines]
            records.append_log_lines(session, job_id, 1, batch)
    finally:
        engine.dispose()
    return job_id


def found(api: TestClient, path: str, token: str | None = None, **params: Any) -> list[str]:
    answer = send(api, "GET", path, token or ADMIN["Authorization"][7:], params=params)
    assert answer.status_code == 200, answer.text
    return [item["line"] for item in answer.json()["items"]]


def test_a_jobs_lines_by_substring_and_by_pattern(api: TestClient, settings: Settings) -> None:
    job_id = add_job(api, settings, make_token(api, "ann"), LINES)
    logs = f"/v1/jobs/{job_id}/logs"
    # Case-sensitive, and %, _ and \ are plain characters.
    assert found(api, logs, q="ERROR") == ["ERROR: NCCL watchdog timeout"]
    assert found(api, logs, q="100%") == ["100% of the data loaded"]
    assert found(api, logs, q="a_b") == ["a_b is a name, axb is not"]
    assert found(api, logs, q="✓") == ["naïve unicode ✓ line"]
    assert found(api, logs, q="\\") == [] and found(api, logs, q="no such text") == []
    assert found(api, logs, q=r"loss=0\.54\d+", regex="true") == ["step 1 loss=0.5410 lr=0.001"]
    assert found(api, logs, regex=r"^(ERROR|error):") == [LINES[4][1], LINES[5][1]]
    assert found(api, logs, q="loss", rank=1) == ["step 1 loss=0.5410 lr=0.001"]
    # Pages of matches, by seq like every page of lines.
    first = api.get(logs, params={"q": "1", "limit": 2}).json()
    assert [i["line"] for i in first["items"]] == [LINES[0][1], LINES[1][1]]
    rest = found(api, logs, q="1", after=first["next_after"])
    assert rest == [LINES[2][1], LINES[7][1]]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_bad_and_unbounded_patterns_are_refused(api: TestClient, settings: Settings) -> None:
    job_id = add_job(api, settings, make_token(api, "ann"), LINES)
    logs = f"/v1/jobs/{job_id}/logs"
    for params in (
        {"q": "(a{1,100}){1,100}b", "regex": "true"},
        {"q": r"(\w)\1", "regex": "true"},
        {"q": "(?=x)y", "regex": "true"},
        {"q": "([", "regex": "true"},
        {"q": ""},
        {"q": "x" * 257},
        {"q": "a\x00b"},
        {"q": "x", "regex": "[a-"},
    ):
        answer = api.get(logs, params=params)
        error = assert_error_body(answer, 422)
        assert error["code"] in ("bad_pattern", "validation_error"), (params, error)
    assert_error_body(api.get("/v1/logs"), 422)


@pytest.fixture
def slow_api(settings: Settings) -> Iterator[TestClient]:
    hurried = settings.model_copy(update={"log_search_timeout_s": 0.001})
    with TestClient(create_app(hurried), raise_server_exceptions=False, headers=ADMIN) as client:
        yield client


def test_a_search_past_its_time_limit_is_stopped(slow_api: TestClient, settings: Settings) -> None:
    lines = [
        (i % 2, f"step {i} loss={i / 7:.4f} throughput={i % 997} samples/s") for i in range(5_000)
    ]
    job_id = add_job(slow_api, settings, ADMIN["Authorization"][7:], lines)
    answer = slow_api.get(f"/v1/jobs/{job_id}/logs", params={"q": "[0-9]+x$", "regex": "true"})
    assert assert_error_body(answer, 422)["code"] == "search_timeout", answer.text
    # The connection is usable afterwards.
    assert slow_api.get(f"/v1/jobs/{job_id}").status_code == 200


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_search_across_jobs_sees_only_the_callers_own(api: TestClient, settings: Settings) -> None:
    ann, bob = make_token(api, "ann"), make_token(api, "bob")
    anns = add_job(api, settings, ann, [(0, "shared needle from ann")])
    add_job(api, settings, bob, [(0, "shared needle from bob")])
    mine = send(api, "GET", "/v1/logs", ann, params={"q": "shared needle"}).json()["items"]
    assert [(i["job_id"], i["line"]) for i in mine] == [(anns, "shared needle from ann")]
    assert found(api, "/v1/logs", q="shared needle") == [
        "shared needle from bob",
        "shared needle from ann",
    ]
    assert found(api, "/v1/logs", q="shared", owner="bob") == ["shared needle from bob"]
    other = send(api, "GET", "/v1/logs", ann, params={"q": "shared", "owner": "bob"})
    assert_error_body(other, 403)
    assert found(api, "/v1/logs", ann, q="needle", regex="true", since=time.time() + 60) == []
    assert len(found(api, "/v1/logs", ann, q="needle", since="2020-01-01T00:00:00Z")) == 1


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_the_trigram_index_serves_a_search_among_many_lines(
    api: TestClient, settings: Settings
) -> None:
    job_id = add_job(api, settings, ADMIN["Authorization"][7:], [(0, "warm-up")])
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine) as session:
            session.execute(
                text(
                    "INSERT INTO log_line (job_id, seq, attempt, rank, node, ts, line) "
                    "SELECT :job, 10 + g, 1, 0, 0, g, 'step ' || g || ' loss=' || g * 7 % 1000 "
                    "FROM generate_series(1, 5000) g"
                ),
                {"job": job_id},
            )
            session.execute(
                text("UPDATE log_line SET line = 'RuntimeError needle-7f3a' WHERE seq = 3000")
            )
            session.execute(text("ANALYZE log_line"))
            session.commit()
            # The index serves the very condition the search builds (at this size a scan is
            # as cheap; at 1,000,000 lines the planner takes the index: bench/p9_log_search.py).
            session.execute(text("SET LOCAL enable_seqscan = off"))
            condition = line_matches(session, check_query("needle-7f3a", False))
            stmt = select(LogLine.id).where(condition)
            compiled = stmt.compile(engine)
            explain = f"EXPLAIN {compiled}"
            plan = session.connection().exec_driver_sql(explain, compiled.params).all()
    finally:
        engine.dispose()
    assert "ix_log_line_line_trgm" in "\n".join(row[0] for row in plan)
    hits = api.get(f"/v1/jobs/{job_id}/logs", params={"q": "needle-7f3a"}).json()["items"]
    assert [(h["seq"], h["line"]) for h in hits] == [(3000, "RuntimeError needle-7f3a")]
