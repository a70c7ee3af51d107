"""The nodes of a multi-node attempt in a real database (SQLite and PostgreSQL): who joins and
hosts the rendezvous, and how the nodes' ends decide the attempt; the reaper on a lost node."""

import threading
from datetime import timedelta

from redis import Redis
from rq import Queue
from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState, NodeState
from service import records
from service.db import session_scope
from service.executors.rq import RQExecutor, attempt_tasks, enqueue_attempt, rq_job_id
from service.models import Job, JobEvent, JobNode, utcnow
from service.reaper import reap_once
from service.scheduling.planner import WorkerCapacity
from service.scheduling.reservations import unfinished_node_workers, without_lanes
from service.settings import Settings


def new_job(engine: Engine, nnodes: int = 2, max_retries: int = 0) -> str:
    spec = JobSpec(name="multi", recipe="synthetic", nnodes=nnodes, max_retries=max_retries)
    with session_scope(engine) as session:
        return records.create_job(session, spec).id


def join(engine: Engine, job_id: str, node: int, attempt: int = 1) -> records.NodeSeat | None:
    with session_scope(engine) as session:
        return records.join_node(
            session,
            job_id,
            attempt,
            node,
            worker=f"w{node}",
            host=f"host{node}",
            endpoint=f"host{node}:{29500 + node}",
        )


def finish(
    engine: Engine,
    job_id: str,
    node: int,
    state: NodeState,
    reason: ExitReason | None = None,
    message: str | None = None,
) -> records.AttemptEnd:
    with session_scope(engine) as session:
        return records.finish_node(
            session, job_id, 1, node, state=state, exit_reason=reason, message=message
        )


def job_of(engine: Engine, job_id: str) -> Job:
    with session_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def states_recorded(engine: Engine, job_id: str) -> list[str]:
    with session_scope(engine) as session:
        stmt = select(JobEvent).where(JobEvent.job_id == job_id).order_by(col(JobEvent.seq))
        return [e.data["state"] for e in session.exec(stmt).all() if e.kind == "state"]


def test_the_first_node_hosts_the_rendezvous_and_the_others_meet_there(engine: Engine) -> None:
    job_id = new_job(engine, nnodes=3)
    first = join(engine, job_id, 2)
    assert first is not None and (first.endpoint, first.is_host) == ("host2:29502", True)
    job = job_of(engine, job_id)
    assert (job.state, job.worker) == ("starting", "w2")
    second = join(engine, job_id, 0)
    assert second is not None and (second.endpoint, second.is_host) == ("host2:29502", False)
    assert second.spec["nnodes"] == 3
    assert join(engine, job_id, 0) is None, "a node joins once"
    assert join(engine, job_id, 3) is None, "there is no node 3 of 3"
    assert join(engine, job_id, 1, attempt=2) is None, "not the job's attempt"
    assert states_recorded(engine, job_id) == ["queued", "starting"]


def test_a_node_cannot_join_once_the_attempt_runs_or_is_cancelled(engine: Engine) -> None:
    job_id = new_job(engine)
    assert join(engine, job_id, 0) is not None
    with session_scope(engine) as session:
        assert records.transition_job(session, job_id, JobState.CANCELLING, attempt=1)
    assert join(engine, job_id, 1) is None


def test_success_is_recorded_once_every_node_has_succeeded(engine: Engine) -> None:
    job_id = new_job(engine)
    join(engine, job_id, 0), join(engine, job_id, 1)
    assert finish(engine, job_id, 1, NodeState.SUCCEEDED, ExitReason.COMPLETED).recorded is False
    assert job_of(engine, job_id).state == "starting"
    assert finish(engine, job_id, 0, NodeState.SUCCEEDED, ExitReason.COMPLETED).recorded is True
    job = job_of(engine, job_id)
    assert (job.state, job.exit_reason, job.exit_code) == ("succeeded", "completed", 0)


def test_nodes_finishing_together_record_the_success_once(engine: Engine) -> None:
    job_id = new_job(engine, nnodes=4)
    for node in range(4):
        join(engine, job_id, node)
    barrier = threading.Barrier(4)
    ends: list[records.AttemptEnd] = []

    def run(node: int) -> None:
        barrier.wait()
        ends.append(finish(engine, job_id, node, NodeState.SUCCEEDED, ExitReason.COMPLETED))

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(e.recorded for e in ends) == [False, False, False, True]
    assert job_of(engine, job_id).state == "succeeded"
    assert states_recorded(engine, job_id).count("succeeded") == 1


def test_the_first_failure_ends_the_attempt_with_the_announced_cause(engine: Engine) -> None:
    job_id = new_job(engine)
    join(engine, job_id, 0), join(engine, job_id, 1)
    with session_scope(engine) as session:
        records.announce_node_failure(
            session, job_id, 1, 1, exit_reason=ExitReason.WORKER_LOST, message="worker w1 gone"
        )
    # Node 0's ranks fail next (their peer vanished) and it is the first to finish.
    end = finish(engine, job_id, 0, NodeState.FAILED, ExitReason.USER_ERROR, "rank 0 failed")
    assert end.recorded and end.retried is None
    job = job_of(engine, job_id)
    assert (job.state, job.exit_reason) == ("failed", "worker_lost")
    assert job.message == "node 1 (worker w1): worker w1 gone"
    # The announcing node finishes later: only its row changes.
    assert (
        finish(engine, job_id, 1, NodeState.FAILED, ExitReason.WORKER_LOST) == records.AttemptEnd()
    )
    with session_scope(engine) as session:
        rows = {n.node: n for n in records.list_nodes(session, job_id)}
    assert (rows[0].state, rows[0].exit_reason) == ("failed", "user_error")
    assert (rows[1].state, rows[1].exit_reason) == ("failed", "worker_lost")


def test_a_failure_with_retries_left_queues_the_next_attempt(engine: Engine) -> None:
    job_id = new_job(engine, max_retries=1)
    join(engine, job_id, 0), join(engine, job_id, 1)
    end = finish(engine, job_id, 1, NodeState.FAILED, ExitReason.OOM, "rank 1 failed")
    assert end.recorded and end.retried is not None and end.retried.attempt == 2
    job = job_of(engine, job_id)
    assert (job.state, job.attempt) == ("queued", 2)
    assert job.message is not None and "node 1 (worker w1): rank 1 failed" in job.message
    # The other node, stopped because the attempt ended elsewhere, changes nothing.
    assert finish(engine, job_id, 0, NodeState.STOPPED) == records.AttemptEnd()
    assert job_of(engine, job_id).state == "queued"
    assert join(engine, job_id, 0, attempt=2) is not None


def test_a_cancel_ends_when_every_joined_node_has_stopped(engine: Engine) -> None:
    job_id = new_job(engine)
    join(engine, job_id, 0), join(engine, job_id, 1)
    with session_scope(engine) as session:
        assert records.transition_job(session, job_id, JobState.CANCELLING, attempt=1)
    assert finish(engine, job_id, 0, NodeState.CANCELLED, ExitReason.CANCELLED).recorded is False
    assert job_of(engine, job_id).state == "cancelling"
    # A node whose ranks broke before it saw the cancel still counts as stopped.
    assert finish(engine, job_id, 1, NodeState.FAILED, ExitReason.USER_ERROR).recorded is True
    assert job_of(engine, job_id).state == "cancelled"


def test_the_tasks_of_every_node_are_enqueued_together(engine: Engine, redis_url: str) -> None:
    job_id = new_job(engine, nnodes=3)
    redis = Redis.from_url(redis_url)
    try:
        enqueue_attempt(redis, job_of(engine, job_id), grace_s=1)
        queue = Queue("default", connection=redis)
        assert queue.job_ids == [rq_job_id(job_id, 1, n) for n in range(3)]
        assert [queue.fetch_job(i).args for i in queue.job_ids] == [  # type: ignore[union-attr]
            (job_id, 1, n) for n in range(3)
        ]
        assert [t.task_id for t in attempt_tasks(job_of(engine, job_id))] == queue.job_ids
    finally:
        redis.close()


def test_the_reaper_ends_the_attempt_of_a_lost_node_while_others_heartbeat(
    engine: Engine, settings: Settings, redis_url: str
) -> None:
    settings = settings.model_copy(update={"reaper_lost_after_s": 20.0})
    job_id = new_job(engine, max_retries=1)
    join(engine, job_id, 0), join(engine, job_id, 1)
    with session_scope(engine) as session:
        session.execute(
            update(JobNode)
            .where(col(JobNode.job_id) == job_id, col(JobNode.node) == 1)
            .values(last_heartbeat=utcnow() - timedelta(seconds=60))
        )
        session.commit()
        assert records.touch_job_heartbeat(session, job_id, 1, node=0) == JobState.STARTING
    redis = Redis.from_url(redis_url)
    try:
        report = reap_once(engine, RQExecutor(redis, grace_s=1), settings)
        assert report.retried == [job_id]
        job = job_of(engine, job_id)
        assert (job.state, job.attempt) == ("queued", 2)
        assert job.message is not None and "node 1 (worker w1): worker w1 lost" in job.message
        assert Queue("default", connection=redis).job_ids == [
            rq_job_id(job_id, 2, 0),
            rq_job_id(job_id, 2, 1),
        ]
        assert reap_once(engine, RQExecutor(redis, grace_s=1), settings).retried == [], "once"
        # The node that heartbeats sees its attempt is over.
        with session_scope(engine) as session:
            assert records.touch_job_heartbeat(session, job_id, 1, node=0) is None
    finally:
        redis.close()


def test_deleting_a_job_removes_its_nodes(engine: Engine) -> None:
    job_id = new_job(engine)
    join(engine, job_id, 0)
    finish(engine, job_id, 0, NodeState.FAILED, ExitReason.USER_ERROR)
    with session_scope(engine) as session:
        records.delete_job_rows(session, job_id)
        assert records.list_nodes(session, job_id) == []


def test_a_retry_is_given_no_worker_whose_node_of_the_attempt_before_never_ended(
    engine: Engine,
) -> None:
    """Node 1 fails at once because node 0's host died; the job is retried at once, while the
    dead worker w0's record lives on: the dispatcher must not place the retry on w0 until the
    reaper's time for a silent node has passed."""
    job_id = new_job(engine, max_retries=1)
    for node in (0, 1):
        assert join(engine, job_id, node) is not None
    finish(engine, job_id, 1, NodeState.FAILED, ExitReason.USER_ERROR, "peer closed")
    assert job_of(engine, job_id).attempt == 2
    recent = utcnow() - timedelta(seconds=5)
    with engine.connect() as connection:
        assert unfinished_node_workers(connection, [(job_id, 2)], recent) == {"w0"}
        # Heard from before `since`: the rule for silent workers decides, not this one.
        assert unfinished_node_workers(connection, [(job_id, 2)], utcnow()) == set()
        assert unfinished_node_workers(connection, [(job_id, 1)], recent) == set()
    finish(engine, job_id, 0, NodeState.STOPPED)  # w0 was alive after all: it said so
    with engine.connect() as connection:
        assert unfinished_node_workers(connection, [(job_id, 2)], recent) == set()


def test_a_pool_loses_only_the_lanes_given() -> None:
    pools = [
        WorkerCapacity("w0", frozenset({"q"}), ("cpu:0",)),
        WorkerCapacity("host/p", frozenset({"q"}), ("cpu:0", "cpu:1"), ("w1", "w2")),
    ]
    assert without_lanes(pools, {"w0", "w2"}) == [
        WorkerCapacity("host/p", frozenset({"q"}), ("cpu:0", "cpu:1"), ("w1",))
    ]
    assert without_lanes(pools, set()) == pools
