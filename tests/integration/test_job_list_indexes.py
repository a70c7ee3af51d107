"""`GET /v1/jobs` under every filter reads an index that holds the jobs newest first (no scan,
no sort of all matches), tags included, and counts only up to a limit (real databases)."""

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Engine

from jobs.states import JobState
from service.app import create_app
from service.db import make_engine
from service.records.job_rows import job_list_query
from service.settings import Settings
from tests.integration.conftest import ADMIN

FILTERS: list[tuple[dict[str, Any], str]] = [
    ({}, "ix_job_created_id"),
    ({"state": JobState.QUEUED}, "ix_job_state_created_id"),
    ({"owner": "ann"}, "ix_job_owner_created_id"),
    ({"owner": "ann", "state": JobState.QUEUED}, "ix_job_owner_state_created_id"),
    ({"name": "sweep"}, "ix_job_name_created_id"),
    ({"tags": [("team", "vision")]}, "ix_job_tag_key_value_created"),
]


def plan(engine: Engine, filters: dict[str, Any]) -> str:
    stmt, _ = job_list_query(**filters)
    sql = str(stmt.limit(50).compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.execute(text(f"EXPLAIN QUERY PLAN {sql}")).all()
            return "\n".join(str(row[-1]) for row in rows)
        # The tables are small here: make the planner show what it would do with many rows.
        connection.execute(text("SET enable_seqscan = off"))
        connection.execute(text("SET enable_bitmapscan = off"))
        return "\n".join(row[0] for row in connection.execute(text(f"EXPLAIN {sql}")).all())


def test_every_filter_reads_its_index_in_order(settings: Settings) -> None:
    engine = make_engine(settings.resolved_database_url)
    try:
        for filters, index in FILTERS:
            shown = plan(engine, filters)
            assert index in shown, (filters, shown)
            # Newest first straight from the index: no sort of every match.
            assert "TEMP B-TREE" not in shown and "Sort" not in shown, (filters, shown)
    finally:
        engine.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_tag_filters_and_a_bounded_total(settings: Settings) -> None:
    bounded = settings.model_copy(update={"job_count_exact_limit": 3})
    with TestClient(create_app(bounded), raise_server_exceptions=False, headers=ADMIN) as api:
        ids = []
        for i in range(5):
            tags = {"team": "vision" if i % 2 == 0 else "text", "run": str(i)}
            job = api.post("/v1/jobs", json={"name": "t", "recipe": "synthetic", "tags": tags})
            ids.append(job.json()["id"])
        vision = api.get("/v1/jobs", params={"tag": "team=vision"}).json()
        assert [j["id"] for j in vision["items"]] == [ids[4], ids[2], ids[0]]
        assert (vision["total"], vision["total_is_estimate"]) == (3, False)
        both = api.get("/v1/jobs", params=[("tag", "team=vision"), ("tag", "run=2")]).json()
        assert [j["id"] for j in both["items"]] == [ids[2]]
        everything = api.get("/v1/jobs", params={"limit": 2}).json()
        assert len(everything["items"]) == 2
        assert (everything["total"], everything["total_is_estimate"]) == (3, True)
        # Hostile values are plain values, never SQL or JSON paths.
        for hostile in ("team=' OR '1'='1", 'team"]=x', "=x", "nokey"):
            response = api.get("/v1/jobs", params={"tag": hostile})
            assert response.status_code in (200, 400), hostile
            if response.status_code == 200:
                assert response.json()["items"] == []
            else:
                assert response.json()["error"]["code"] == "bad_request"
