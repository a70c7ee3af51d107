"""The dispatcher over a real database (SQLite and PostgreSQL) and a real Redis, its passes run
by the test: admission by priority and fair share, all nodes at once, positions and reasons,
the lease's fencing, and the scheduling routes with hostile input. Workers are their records
in Redis (what real workers write); tests/e2e/test_scheduling.py runs real ones."""

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis
from rq import Queue
from sqlalchemy import select
from sqlmodel import Session

from devstack.workers import register_worker
from jobs.spec import JobSpec
from jobs.states import JobState
from service import records
from service.app import create_app
from service.db import make_engine
from service.executors.registry import make_executor
from service.models import JobReservation, utcnow
from service.reaper import reap_once
from service.scheduling.admission import admit
from service.scheduling.capacity import dispatch_queue_name
from service.scheduling.dispatcher import Dispatcher
from service.scheduling.lease import LeaseLost, take_lease
from service.scheduling.planner import Placement, QueuedJob
from service.settings import Settings
from tests.integration.conftest import ADMIN_TOKEN
from tests.integration.test_api_jobs import assert_error_body
from tests.integration.test_auth import make_token, send
from tests.support.procs import wait_until

NOOP = {"name": "noop", "recipe": "synthetic", "nproc_per_node": 1}


@pytest.fixture
def dispatch_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"dispatch_lease_s": 60.0})


@pytest.fixture
def dispatcher(dispatch_settings: Settings) -> Iterator[Dispatcher]:
    """The test's own dispatcher, holding the lease before the app starts: the app's thread
    waits for it, and every pass is the test's."""
    engine = make_engine(dispatch_settings.resolved_database_url)
    redis = Redis.from_url(dispatch_settings.redis_url)
    found = Dispatcher(engine, redis, dispatch_settings)
    assert found.keep_lease() is not None
    yield found
    found.give_up()
    engine.dispose()


@pytest.fixture
def dispatch_api(dispatch_settings: Settings, dispatcher: Dispatcher) -> Iterator[TestClient]:
    app = create_app(dispatch_settings)
    with TestClient(
        app, raise_server_exceptions=False, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    ) as client:
        yield client


def submit(api: TestClient, token: str, **spec: Any) -> str:
    response = send(api, "POST", "/v1/jobs", token, json={**NOOP, **spec})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def reservations(dispatcher: Dispatcher) -> list[JobReservation]:
    with Session(dispatcher.engine) as session:
        return list(session.exec(select(JobReservation)).scalars())  # type: ignore[call-overload]


def finish(dispatcher: Dispatcher, job_id: str) -> None:
    """What the worker does: take the attempt, then end it."""
    with Session(dispatcher.engine) as session:
        assert records.take_job(session, job_id, 1) is not None
        assert records.transition_job(session, job_id, JobState.SUCCEEDED, attempt=1)


def test_a_pass_admits_by_priority_and_fair_share_all_nodes_at_once(
    dispatch_api: TestClient, dispatcher: Dispatcher
) -> None:
    redis = dispatcher.redis
    for name in ("w1", "w2", "w3"):
        register_worker(redis, name)
    alice, bob = make_token(dispatch_api, "alice"), make_token(dispatch_api, "bob")
    a = [submit(dispatch_api, alice) for _ in range(3)]
    b = submit(dispatch_api, bob)
    gang = submit(dispatch_api, ADMIN_TOKEN, priority=5, nnodes=2, launcher="torchrun")
    lease = dispatcher.keep_lease()
    assert lease is not None

    report = dispatcher.run_pass(lease)
    # The 2-node job first (priority), both nodes in one admission; then the oldest job of
    # the two owners that hold nothing.
    assert report.admitted == [gang, a[0]]
    held = {(r.job_id, r.node): r for r in reservations(dispatcher)}
    assert {held[(gang, 0)].worker, held[(gang, 1)].worker, held[(a[0], 0)].worker} == {
        "w1",
        "w2",
        "w3",
    }
    assert held[(gang, 0)].admitted_at == held[(gang, 1)].admitted_at
    assert held[(gang, 0)].token == lease.token
    # Each node is on its worker's own queue.
    queued = {
        w: Queue(dispatch_queue_name(w), connection=redis).job_ids for w in ("w1", "w2", "w3")
    }
    assert sorted(i for ids in queued.values() for i in ids) == sorted(
        [f"{gang}-1-node0", f"{gang}-1-node1", f"{a[0]}-1"]
    )

    # Bob holds nothing while Alice holds a device: his job is next.
    bobs = send(dispatch_api, "GET", f"/v1/jobs/{b}", bob).json()
    assert bobs["queue_position"] == 1
    assert (
        bobs["pending_reason"]
        == "waiting for 1 node(s) with 1 free device(s) on queue 'default' (0 free now)"
    )
    line = send(dispatch_api, "GET", "/v1/queue", bob).json()
    assert [e["position"] for e in line["items"]] == [1, 2, 3]
    assert line["items"][0]["job_id"] == b
    # Another owner's waiting jobs show no id, name, owner or reason.
    assert line["items"][1] | {"position": None, "created_at": None} == {
        "position": None,
        "job_id": None,
        "name": None,
        "owner": None,
        "queue": "default",
        "priority": 0,
        "nnodes": 1,
        "nproc_per_node": 1,
        "created_at": None,
        "pending_reason": None,
    }
    assert line["dispatcher"]["token"] == lease.token
    workers = {w["name"]: w for w in dispatch_api.get("/v1/workers").json()["items"]}
    assert workers["w3"]["reservations"] or workers["w1"]["reservations"]
    assert sum(len(w["reservations"]) for w in workers.values()) == 3

    finish(dispatcher, a[0])
    report = dispatcher.run_pass(lease)
    assert report.released == 1 and report.admitted == [b]
    finish(dispatcher, b)
    assert dispatcher.run_pass(lease).admitted == [a[1]]

    usage = send(dispatch_api, "GET", "/v1/usage", alice).json()
    assert [u["owner"] for u in usage["items"]] == ["alice"]
    assert usage["items"][0]["jobs"] == 2 and usage["items"][0]["device_seconds"] > 0
    everyone = dispatch_api.get("/v1/usage").json()["items"]
    assert {u["owner"] for u in everyone} == {"admin", "alice", "bob"}
    assert_error_body(send(dispatch_api, "GET", "/v1/usage?owner=bob", alice), 403, "forbidden")


def test_a_dispatcher_that_lost_its_lease_admits_nothing(settings: Settings) -> None:
    engine = make_engine(settings.resolved_database_url)
    try:
        with Session(engine, expire_on_commit=False) as session:
            job = records.create_job(session, JobSpec.model_validate(NOOP), owner="alice")
        queued = QueuedJob(job.id, 1, "alice", "default", 0, 1, 1, time.time())
        place = [Placement(0, "w1", ("cpu:0",))]
        with engine.begin() as connection:
            old = take_lease(connection, "old", ttl_s=0.3)
        assert old is not None
        with engine.begin() as connection:
            assert take_lease(connection, "new", ttl_s=30) is None  # not expired yet
        new = None

        def take_over() -> bool:
            nonlocal new
            with engine.begin() as connection:
                new = take_lease(connection, "new", ttl_s=30)
            return new is not None

        assert wait_until(take_over, timeout=10)
        assert new is not None and new.token == old.token + 1
        with pytest.raises(LeaseLost), engine.begin() as connection:
            admit(connection, old, 30, [(queued, place)], utcnow())
        with engine.begin() as connection:
            assert take_lease(connection, "old", ttl_s=30) is None
        with engine.begin() as connection:
            [(again, spec)] = admit(connection, new, 30, [(queued, place)], utcnow())
            assert again == queued and spec["name"] == "noop"
            # Twice is once: the job is no longer waiting.
            assert (
                admit(connection, new, 30, [(queued, place)], utcnow() + timedelta(seconds=1)) == []
            )
        with Session(engine) as session:
            rows = list(session.exec(select(JobReservation)).scalars())  # type: ignore[call-overload]
        assert [(r.job_id, r.worker, r.token) for r in rows] == [(job.id, "w1", new.token)]
    finally:
        engine.dispose()


# The routes and the reaper's hand-over are the same on both databases; the lease and the
# admission, which depend on their locking, run on both above.
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_scheduling_refusals_and_policies(dispatch_api: TestClient, dispatcher: Dispatcher) -> None:
    register_worker(dispatcher.redis, "w1", slots=2)
    alice = make_token(dispatch_api, "alice")
    # Priority: users up to LAUNCHBAY_MAX_USER_PRIORITY (0), unless their policy says more.
    refused = send(dispatch_api, "POST", "/v1/jobs", alice, json={**NOOP, "priority": 1})
    assert assert_error_body(refused, 422, "policy_violation")["detail"][0]["loc"] == [
        "body",
        "priority",
    ]
    for hostile in (10**6, "high", 1.5, None):
        bad = send(
            dispatch_api, "POST", "/v1/jobs", ADMIN_TOKEN, json={**NOOP, "priority": hostile}
        )
        assert_error_body(bad, 422)
    put = dispatch_api.put("/v1/policies/alice", json={"max_priority": 3, "max_devices": 2})
    assert put.status_code == 200, put.text
    assert submit(dispatch_api, alice, priority=3)
    # Never fits: more devices than any worker of the queue has, or than the quota allows.
    too_big = send(
        dispatch_api, "POST", "/v1/jobs", ADMIN_TOKEN, json={**NOOP, "nproc_per_node": 3}
    )
    assert assert_error_body(too_big, 422, "never_fits")["detail"]["fitting_workers"] == 0
    two_nodes = send(
        dispatch_api,
        "POST",
        "/v1/jobs",
        ADMIN_TOKEN,
        json={**NOOP, "nnodes": 2, "launcher": "torchrun"},
    )
    assert_error_body(two_nodes, 422, "never_fits")
    over_quota = send(
        dispatch_api,
        "POST",
        "/v1/jobs",
        alice,
        json={**NOOP, "nproc_per_node": 2, "nnodes": 2, "launcher": "torchrun"},
    )
    assert assert_error_body(over_quota, 422, "never_fits")["detail"] == {
        "devices": 4,
        "max_devices": 2,
    }
    # A queue no worker serves yet: accepted, waiting with that reason.
    waiting = submit(dispatch_api, alice, queue="later")
    lease = dispatcher.keep_lease()
    assert lease is not None
    dispatcher.run_pass(lease)
    assert (
        dispatch_api.get(f"/v1/jobs/{waiting}").json()["pending_reason"]
        == "no worker serves queue 'later'"
    )

    # The policy routes: admins only, hostile input refused with the error body.
    assert_error_body(
        send(dispatch_api, "PUT", "/v1/policies/alice", alice, json={}), 403, "forbidden"
    )
    assert_error_body(send(dispatch_api, "GET", "/v1/policies", alice), 403, "forbidden")
    for body in (
        {"weight": 0},
        {"weight": -1},
        {"max_devices": -1},
        {"weight": "x"},
        {"other": 1},
        [1],
    ):
        assert_error_body(dispatch_api.put("/v1/policies/alice", json=body), 422)
    for owner in ("..", "a b", "x" * 129, "%00"):
        assert dispatch_api.put(f"/v1/policies/{owner}", json={}).status_code in (404, 422)
    assert dispatch_api.put("/v1/policies/*", json={"weight": 2}).status_code == 200
    listed = dispatch_api.get("/v1/policies").json()["items"]
    assert [(p["owner"], p["weight"]) for p in listed] == [("*", 2.0), ("alice", 1.0)]
    assert dispatch_api.delete("/v1/policies/alice").status_code == 204
    assert_error_body(dispatch_api.delete("/v1/policies/alice"), 404, "not_found")
    # Usage: a period that is not a time, or lies ahead.
    assert_error_body(dispatch_api.get("/v1/usage", params={"since": "yesterday"}), 422)
    ahead = (utcnow() + timedelta(days=1)).isoformat()
    assert_error_body(dispatch_api.get("/v1/usage", params={"since": ahead}), 400, "bad_request")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_reaper_hands_over_again_an_admitted_job_whose_task_is_lost(
    dispatch_api: TestClient, dispatcher: Dispatcher, dispatch_settings: Settings
) -> None:
    redis = dispatcher.redis
    register_worker(redis, "w1")
    admitted, waiting = submit(dispatch_api, ADMIN_TOKEN), submit(dispatch_api, ADMIN_TOKEN)
    lease = dispatcher.keep_lease()
    assert lease is not None
    assert dispatcher.run_pass(lease).admitted == [admitted]
    worker_queue = Queue(dispatch_queue_name("w1"), connection=redis)
    # Redis loses the task (or the dispatcher died between its commit and the hand-over).
    redis.delete(worker_queue.key, f"rq:job:{admitted}-1")
    executor = make_executor(dispatch_settings, redis, dispatcher.engine)
    later = utcnow() + timedelta(seconds=60)
    report = reap_once(dispatcher.engine, executor, dispatch_settings, now=later)
    # The admitted job goes back to its reserved worker; the waiting one is the dispatcher's.
    assert report.enqueued == [admitted]
    assert worker_queue.job_ids == [f"{admitted}-1"]
    assert Queue("default", connection=redis).job_ids == []
    assert dispatch_api.get(f"/v1/jobs/{waiting}").json()["queue_position"] == 1


def test_one_owner_on_a_default_install_runs_by_priority_then_submission_order(
    dispatch_api: TestClient, dispatcher: Dispatcher
) -> None:
    """What FIFO gave one person, the dispatcher gives too (its settings are the defaults'
    but for a longer lease, so that the passes are the test's)."""
    register_worker(dispatcher.redis, "w1")
    first, second = submit(dispatch_api, ADMIN_TOKEN), submit(dispatch_api, ADMIN_TOKEN)
    urgent = submit(dispatch_api, ADMIN_TOKEN, priority=5)
    third = submit(dispatch_api, ADMIN_TOKEN)
    lease = dispatcher.keep_lease()
    assert lease is not None
    order = []
    for _ in range(4):
        report = dispatcher.run_pass(lease)
        order += report.admitted
        for job_id in report.admitted:
            finish(dispatcher, job_id)
    assert order == [urgent, first, second, third]
