"""`GET /v1/runs`: many jobs with their metrics summed up (last, smallest, largest, best) in one
call, owner-scoped, filtered and paged as `GET /v1/jobs`, in a number of queries that does not
grow with the page (no query per job)."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service import records


def _token(api: TestClient, name: str) -> dict[str, str]:
    created = api.post("/v1/tokens", json={"name": name, "role": "user"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


def _job(engine: Engine, owner: str, name: str, losses: list[float], **spec: Any) -> str:
    """A job of `owner` whose steps reported `loss` and `accuracy` (1 - loss)."""
    with Session(engine) as session:
        job = records.create_job(
            session, JobSpec(name=name, recipe="synthetic", **spec), owner=owner
        )
        points = [
            point
            for step, loss in enumerate(losses, 1)
            for point in (
                records.NewMetricPoint(step, 0, "loss", loss, time.time()),
                records.NewMetricPoint(step, 0, "accuracy", 1 - loss, time.time()),
            )
        ]
        records.transition_job(session, job.id, JobState.STARTING, attempt=1)
        records.transition_job(session, job.id, JobState.RUNNING, attempt=1)
        records.append_metric_points(session, job.id, 1, points)
        records.transition_job(
            session, job.id, JobState.SUCCEEDED, attempt=1, exit_reason=ExitReason.COMPLETED
        )
        return job.id


@contextmanager
def counted_queries() -> Iterator[list[str]]:
    statements: list[str] = []

    def count(*args: Any) -> None:
        # The request's statements: not those of the app's own threads (the dispatcher, the
        # reaper, webhook deliveries), which run on their own time.
        if not threading.current_thread().name.startswith("launchbay-"):
            statements.append(args[2])

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(Engine, "before_cursor_execute", count)


def test_runs_sum_up_each_jobs_metrics_for_its_owner_only(api: TestClient, engine: Engine) -> None:
    alice, bob = _token(api, "alice"), _token(api, "bob")
    first = _job(engine, "alice", "sweep", [0.9, 0.3, 0.5], tags={"sweep": "lr"})
    best_high = _job(
        engine,
        "alice",
        "sweep",
        [0.8, 0.6],
        tags={"sweep": "lr"},
        checkpoint={"best_metric": "loss", "best_mode": "max"},
    )
    _job(engine, "bob", "sweep", [0.1], tags={"sweep": "lr"})

    answer = api.get("/v1/runs", headers=alice, params={"tag": "sweep=lr"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total"] == 2 and [run["job"]["id"] for run in body["items"]] == [best_high, first]
    by_id = {run["job"]["id"]: run["metrics"] for run in body["items"]}
    assert by_id[first]["loss"] == {
        "last": 0.5,
        "min": 0.3,
        "max": 0.9,
        "best": 0.3,
        "best_mode": "min",
    }
    assert by_id[first]["accuracy"]["best"] == by_id[first]["accuracy"]["max"]
    assert by_id[first]["accuracy"]["best_mode"] == "max"
    assert by_id[best_high]["loss"]["best"] == 0.8  # the job's best_mode: max

    assert api.get("/v1/runs", headers=alice, params={"owner": "bob"}).status_code == 403
    [bobs] = api.get("/v1/runs", headers=bob).json()["items"]
    assert bobs["metrics"]["loss"]["last"] == 0.1
    page = api.get("/v1/runs", params={"name": "sweep", "limit": 2, "offset": 2}).json()
    assert page["total"] == 3 and len(page["items"]) == 1  # the admin sees every owner's
    assert api.get("/v1/runs", params={"state": "failed"}).json()["items"] == []


def test_runs_cost_the_same_queries_for_two_jobs_or_twelve(api: TestClient, engine: Engine) -> None:
    for i in range(2):
        _job(engine, "", f"few-{i}", [0.5, 0.4])
    # The app's first request opens its connections (SQLite's pragmas are statements too).
    assert api.get("/v1/runs", params={"name_contains": "none"}).status_code == 200
    with counted_queries() as few:
        assert len(api.get("/v1/runs", params={"name_contains": "few"}).json()["items"]) == 2
    for i in range(12):
        _job(engine, "", f"many-{i}", [0.5, 0.4, 0.3])
    with counted_queries() as many:
        items = api.get("/v1/runs", params={"name_contains": "many"}).json()["items"]
    assert len(items) == 12 and all(run["metrics"]["loss"]["min"] == 0.3 for run in items)
    assert len(many) == len(few), (few, many)
