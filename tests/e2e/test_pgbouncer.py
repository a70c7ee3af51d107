"""Many clients, few PostgreSQL connections: the API and a worker through PgBouncer in
transaction pooling (docs/deployment.md, "PgBouncer"), in front of the test's PostgreSQL."""

import json
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from devstack.pgbouncer import private_pgbouncer
from service.db import make_engine
from tests.e2e.conftest import stack_of_its_own

# Server connections PgBouncer may open to the database, whatever the number of its clients.
POOL_SIZE = 4


def server_connections(database_url: str) -> int:
    """Connections to the database on the server itself, other than the one asking."""
    database = database_url.rsplit("/", 1)[1]
    server = database_url.rsplit("/", 1)[0].replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(f"{server}/postgres") as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_job_succeeds_with_the_api_and_a_worker_behind_pgbouncer(
    tmp_path: Path, postgres_url: str
) -> None:
    with private_pgbouncer(postgres_url, "transaction", POOL_SIZE) as pooled:
        # The API applies the migrations through PgBouncer too.
        with stack_of_its_own(tmp_path, database_url=pooled) as stack, stack.client() as http:
            spec = {
                "name": "pooled",
                "recipe": "synthetic",
                "nproc_per_node": 2,
                "config": {"epochs": 2, "log_every_steps": 1},
            }
            job_id = http.post("/v1/jobs", json=spec).json()["id"]
            stack.wait_for_state(http, job_id, {"succeeded", "failed"}, timeout=240)
            job = http.get(f"/v1/jobs/{job_id}").json()
            assert job["state"] == "succeeded", job["message"]
            assert http.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
            chart = http.get(f"/v1/jobs/{job_id}/metrics", params={"max_points": 10}).json()
            assert 0 < len(chart["items"]) <= 10 * len({p["name"] for p in chart["items"]})
            with http.stream("GET", f"/v1/jobs/{job_id}/events") as events:
                lines = [line for line in events.iter_lines() if line.startswith("data:")]
            assert json.loads(lines[-1][5:])["state"] == "succeeded"
            # API, worker, work horse and ranks' reports shared at most POOL_SIZE connections.
            assert server_connections(postgres_url) <= POOL_SIZE


def test_the_engines_share_pooled_server_connections_without_prepared_statements(
    postgres_url: str,
) -> None:
    """Two sessions taking turns on one server connection, each running the same query more
    often than psycopg's threshold for preparing it: with prepared statements the second
    would find the first's statement name taken (or its own missing) on that connection."""
    with private_pgbouncer(postgres_url, "transaction", pool_size=1) as pooled:
        engines = [make_engine(pooled), make_engine(pooled, pooled=False)]
        try:
            connections = [engine.connect() for engine in engines]
            for round_ in range(12):
                for connection in connections:
                    with connection.begin():
                        found = connection.execute(text("SELECT :n + 1"), {"n": round_})
                        assert found.scalar_one() == round_ + 1
            for connection in connections:
                connection.close()
        finally:
            for engine in engines:
                engine.dispose()
        # What the setting prevents: psycopg's own default prepares the sixth run.
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            libpq = pooled.replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(libpq) as first, psycopg.connect(libpq) as second:
                for round_ in range(12):
                    for conn in (first, second):
                        with conn.transaction():
                            conn.execute("SELECT %s::int + 1", (round_,))
