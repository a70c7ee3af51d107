"""The dispatcher when an admission does not lead to a run (docs/scheduling.md, "Hand-over"):
a worker that goes away before it takes the job it was given, an admitted job whose task Redis
lost, a wedge left in the database by an earlier version. Each time the job is admitted again
and the jobs behind it keep using the free workers; a worker that took its job after all keeps
it.

Workers are their records in Redis (what real workers write; `devstack.workers`), over a real
database (SQLite and PostgreSQL) and a real Redis; the dispatcher's passes are the test's.
tests/integration/worker/test_dispatch_worker_lost.py freezes and kills a real worker."""

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from redis import Redis
from rq import Queue
from sqlalchemy import select
from sqlmodel import Session

from devstack.workers import register_worker
from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service import records
from service.db import make_engine
from service.executors.registry import make_executor
from service.models import Job, JobEvent, JobReservation, utcnow
from service.reaper import reap_once
from service.scheduling import admission
from service.scheduling.capacity import active_reservations, dispatch_queue_name
from service.scheduling.dispatcher import Dispatcher
from service.scheduling.reservations import (
    load_reserved_jobs,
    lost_admissions,
    stale_reservations,
)
from service.settings import Settings
from service.worker_records import worker_key

NOOP = {"name": "noop", "recipe": "synthetic", "nproc_per_node": 1}


@pytest.fixture
def dispatch_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"dispatch_lease_s": 60.0})


@pytest.fixture
def dispatcher(dispatch_settings: Settings) -> Iterator[Dispatcher]:
    engine = make_engine(dispatch_settings.resolved_database_url)
    redis = Redis.from_url(dispatch_settings.redis_url)
    found = Dispatcher(engine, redis, dispatch_settings)
    assert found.keep_lease() is not None
    yield found
    found.give_up()
    redis.close()
    engine.dispose()


def create(dispatcher: Dispatcher, **spec: object) -> str:
    with Session(dispatcher.engine, expire_on_commit=False) as session:
        return records.create_job(session, JobSpec.model_validate({**NOOP, **spec}), owner="a").id


def job_of(dispatcher: Dispatcher, job_id: str) -> Job:
    with Session(dispatcher.engine, expire_on_commit=False) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def held(dispatcher: Dispatcher) -> dict[str, tuple[int, str]]:
    """Each job's active reservation: (attempt, worker)."""
    table = JobReservation.__table__  # type: ignore[attr-defined]
    with dispatcher.engine.connect() as connection:
        rows = connection.execute(select(table).where(table.c.released_at.is_(None)))
        return {r.job_id: (r.attempt, r.worker) for r in rows}


def dispatch(dispatcher: Dispatcher, passes: int = 3) -> list[str]:
    """A few passes, as the dispatcher's thread runs them; the jobs admitted."""
    admitted: list[str] = []
    for _ in range(passes):
        lease = dispatcher.keep_lease()
        assert lease is not None
        dispatcher.capacity = None  # the workers as Redis has them now
        admitted += dispatcher.run_pass(lease).admitted
    return admitted


def run_and_finish(dispatcher: Dispatcher, job_id: str, attempt: int) -> None:
    """What the reserved worker does: take the attempt, then end it."""
    with Session(dispatcher.engine) as session:
        assert records.take_job(session, job_id, attempt) is not None
        assert records.transition_job(session, job_id, JobState.SUCCEEDED, attempt=attempt)


def test_a_job_whose_worker_went_away_before_taking_it_is_admitted_again(
    dispatcher: Dispatcher,
) -> None:
    """The wedge of issue 34: a job admitted onto a worker that froze and was killed before it
    took the job was never admitted again, and took every free worker in each pass."""
    redis = dispatcher.redis
    register_worker(redis, "frozen")
    lost, behind = create(dispatcher, max_retries=1), create(dispatcher)
    assert dispatch(dispatcher, 1) == [lost]
    assert held(dispatcher) == {lost: (1, "frozen")}
    # Frozen, its record expires; then it is killed. Another worker comes up.
    redis.delete(worker_key("frozen"))
    register_worker(redis, "w1")

    assert dispatch(dispatcher, 1) == [lost]
    assert held(dispatcher) == {lost: (2, "w1")}
    job = job_of(dispatcher, lost)
    assert (job.state, job.attempt, job.queue_position) == ("queued", 2, None)
    assert job.message is not None and "admitted on worker frozen, which went away" in job.message
    # The frozen worker's task, were it thawed, runs nothing: its attempt is over.
    with Session(dispatcher.engine) as session:
        assert records.take_job(session, lost, 1) is None
    assert Queue(dispatch_queue_name("w1"), connection=redis).job_ids == [f"{lost}-2"]
    # The attempt lost used none of its retries: attempt 2 failing is retried once.
    with Session(dispatcher.engine) as session:
        assert records.take_job(session, lost, 2) is not None
        assert records.requeue_job(session, lost, 2, exit_reason=ExitReason.USER_ERROR)
    assert dispatch(dispatcher, 1) == [lost]
    run_and_finish(dispatcher, lost, 3)
    assert dispatch(dispatcher, 1) == [behind]


def test_an_admitted_job_whose_task_went_with_redis_is_admitted_again(
    dispatcher: Dispatcher, dispatch_settings: Settings
) -> None:
    """Redis restarts without its data: the task and the worker's record are gone; the worker
    registers again at its next heartbeat."""
    redis = dispatcher.redis
    register_worker(redis, "w1")
    job_id = create(dispatcher)
    assert dispatch(dispatcher, 1) == [job_id]
    redis.flushdb()
    assert dispatch(dispatcher, 1) == []
    register_worker(redis, "w1")
    assert dispatch(dispatcher, 1) == [job_id]
    assert held(dispatcher) == {job_id: (2, "w1")}
    assert Queue(dispatch_queue_name("w1"), connection=redis).job_ids == [f"{job_id}-2"]
    # The reaper, later, finds nothing lost.
    executor = make_executor(dispatch_settings, redis, dispatcher.engine)
    later = utcnow() + timedelta(seconds=60)
    assert reap_once(dispatcher.engine, executor, dispatch_settings, now=later).enqueued == []


def test_a_job_wedged_by_an_earlier_version_is_admitted_as_its_next_attempt(
    dispatcher: Dispatcher,
) -> None:
    """Databases that ran the wedge: a queued job whose attempt has only a released
    reservation, which used to refuse it for good (and block the job behind it)."""
    register_worker(dispatcher.redis, "w1")
    wedged, behind = create(dispatcher), create(dispatcher)
    table = JobReservation.__table__  # type: ignore[attr-defined]
    then = utcnow() - timedelta(hours=1)
    with dispatcher.engine.begin() as connection:
        row = {"job_id": wedged, "attempt": 1, "node": 0, "owner": "a", "worker": "gone"}
        row |= {"devices": ["cpu:0"], "token": 1, "admitted_at": then, "released_at": then}
        connection.execute(table.insert().values(**row))

    assert dispatch(dispatcher) == [wedged]
    assert held(dispatcher) == {wedged: (2, "w1")}
    assert job_of(dispatcher, wedged).attempt == 2
    run_and_finish(dispatcher, wedged, 2)
    assert dispatch(dispatcher, 1) == [behind]
    # The queued event of the new attempt says why.
    events = JobEvent.__table__  # type: ignore[attr-defined]
    with dispatcher.engine.connect() as connection:
        stmt = select(events.c.data).where(events.c.job_id == wedged, events.c.attempt == 2)
        queued = connection.execute(stmt.order_by(events.c.seq)).scalars().first()
    assert queued["state"] == "queued" and queued["retry_of"] == 1
    assert (
        queued["message"]
        == "attempt 1 was admitted on worker gone, which went away before taking it"
    )


def test_a_worker_that_takes_its_job_as_the_pass_finds_it_gone_keeps_it(
    dispatcher: Dispatcher,
) -> None:
    """Its record expired (a heartbeat late under load) and the pass read it as gone, but it
    took the job before the pass wrote: the job runs there, so its reservation stays (the
    devices are in use) and it is not queued again."""
    register_worker(dispatcher.redis, "late")
    job_id = create(dispatcher)
    assert dispatch(dispatcher, 1) == [job_id]
    with dispatcher.engine.connect() as connection:
        reservations = active_reservations(connection)
        jobs = load_reserved_jobs(connection, reservations)
    stale = stale_reservations(reservations, jobs, live_workers=())
    lost = lost_admissions(stale, jobs, live_workers=())
    assert lost == {(job_id, 1): ["late"]}
    with Session(dispatcher.engine) as session:
        assert records.take_job(session, job_id, 1) is not None
    with dispatcher.engine.begin() as connection:
        assert admission.release(connection, stale, jobs, lost, utcnow()) == {}
    assert held(dispatcher) == {job_id: (1, "late")}
    assert (job_of(dispatcher, job_id).state, job_of(dispatcher, job_id).attempt) == ("starting", 1)


def test_a_node_whose_worker_went_away_before_joining_ends_its_started_attempt(
    dispatcher: Dispatcher,
) -> None:
    """A 2-node job is admitted onto workers a and b; a's node joins (the job starts and that
    node waits for the other in the rendezvous), b goes away before its node joins. Once b has
    been gone for half of `reaper_lost_after_s`, the attempt ends as `worker_lost` and its
    retry is admitted, instead of a's node holding its devices until the rendezvous times
    out (600 s by default). A worker back within that time (its record lost with Redis) ends
    nothing, and a single-node job started on a worker gone is left to the reaper."""
    redis = dispatcher.redis
    dispatcher.settings = dispatcher.settings.model_copy(update={"reaper_lost_after_s": 0.6})
    grace_s = 0.3
    register_worker(redis, "a")
    register_worker(redis, "b")
    gang = create(dispatcher, nnodes=2, launcher="torchrun", max_retries=1)
    assert dispatch(dispatcher, 1) == [gang]
    register_worker(redis, "c")
    single = create(dispatcher)
    assert dispatch(dispatcher, 1) == [single]
    table = JobReservation.__table__  # type: ignore[attr-defined]
    with dispatcher.engine.connect() as connection:
        rows = connection.execute(select(table).where(table.c.job_id == gang))
        node_on = {r.worker: r.node for r in rows}
    with Session(dispatcher.engine) as session:
        seat = records.join_node(
            session, gang, 1, node_on["a"], worker="a", host="ha", endpoint="ha:29500"
        )
        assert seat is not None and seat.is_host
        assert records.take_job(session, single, 1, worker="c") is not None

    def gone(*names: str) -> None:
        redis.delete(*(worker_key(n) for n in names))

    # b's record lost with Redis, written again at its next heartbeat: nothing ends.
    gone("b", "c")
    dispatch(dispatcher, 1)
    register_worker(redis, "b")
    time.sleep(grace_s + 0.1)
    dispatch(dispatcher, 1)
    assert (job_of(dispatcher, gang).state, job_of(dispatcher, gang).attempt) == ("starting", 1)

    # b gone for good: seen gone first, then, the grace over, the attempt ends.
    gone("b")
    dispatch(dispatcher, 1)
    assert (job_of(dispatcher, gang).state, job_of(dispatcher, gang).attempt) == ("starting", 1)
    time.sleep(grace_s + 0.1)
    register_worker(redis, "d")
    assert dispatch(dispatcher, 2) == [gang]
    job = job_of(dispatcher, gang)
    assert (job.state, job.attempt) == ("queued", 2)
    with Session(dispatcher.engine) as session:
        nodes = {n.node: n for n in records.list_nodes(session, gang) if n.attempt == 1}
    lost = nodes[node_on["b"]]
    assert (lost.worker, lost.state, lost.exit_reason) == ("b", "failed", "worker_lost")
    assert lost.message == "worker b went away before the node joined"
    assert job.message == (
        f"retry 1 of 1: attempt 1 ended with worker_lost: node {node_on['b']} (worker b): "
        "worker b went away before the node joined"
    )
    # The retry runs on a (its node of attempt 1 stops, seeing the attempt over) and d.
    with dispatcher.engine.connect() as connection:
        rows = connection.execute(
            select(table).where(table.c.job_id == gang, table.c.released_at.is_(None))
        )
        assert {(r.attempt, r.worker) for r in rows} == {(2, "a"), (2, "d")}
    # The single-node job on c, gone too, is the reaper's (its heartbeat), not ended here.
    assert (job_of(dispatcher, single).state, job_of(dispatcher, single).attempt) == (
        "starting",
        1,
    )
