"""The reaper against a real database and a real Redis: lost jobs are retried, failed or
cancelled, queued jobs whose queue entry vanished are enqueued again, a late worker's writes
are refused, and several reapers at once change each job once."""

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job as RQJob
from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service import records
from service.db import make_engine, session_scope
from service.executors.base import DryRunPlan, TaskEnd, TaskPlan, TaskStatus
from service.executors.registry import RoutingExecutor
from service.executors.rq import RQExecutor, enqueue_attempt, rq_job_id
from service.models import Job, JobEvent, utcnow
from service.reaper import ReapReport, note_pending, reap_once
from service.settings import Settings

LAUNCHBAY = str(Path(sys.executable).parent / "launchbay")


@dataclass
class Env:
    settings: Settings
    engine: Engine
    redis: Redis

    def job(self, max_retries: int = 0, state: JobState = JobState.RUNNING) -> str:
        """A job of attempt 1 in `state`, its heartbeat a minute old, as a lost worker left it."""
        spec = JobSpec(name="lost", recipe="synthetic", max_retries=max_retries)
        with session_scope(self.engine) as session:
            job = records.create_job(session, spec)
            enqueue_attempt(self.redis, job, grace_s=1)
            path = {
                JobState.STARTING: [JobState.STARTING],
                JobState.RUNNING: [JobState.STARTING, JobState.RUNNING],
                JobState.CANCELLING: [JobState.STARTING, JobState.RUNNING, JobState.CANCELLING],
            }[state]
            for target in path:
                assert records.transition_job(session, job.id, target, attempt=1, worker="w:1")
            self.set_heartbeat(job.id, seconds_ago=60)
            return job.id

    def set_heartbeat(self, job_id: str, seconds_ago: float) -> None:
        at = utcnow() - timedelta(seconds=seconds_ago)
        with session_scope(self.engine) as session:
            session.execute(
                update(Job).where(col(Job.id) == job_id).values(last_heartbeat=at, started_at=at)
            )
            session.commit()

    def get(self, job_id: str) -> Job:
        with session_scope(self.engine) as session:
            job = session.get(Job, job_id)
            assert job is not None
            return job

    def reap(self, now: datetime | None = None) -> ReapReport:
        executor = RQExecutor(self.redis, grace_s=self.settings.cancel_grace_s)
        return reap_once(self.engine, executor, self.settings, now=now)

    def after_queued_grace(self) -> datetime:
        """A pass's clock once the queued grace has passed (no waiting for it)."""
        return utcnow() + timedelta(seconds=self.settings.reaper_queued_grace_s + 0.5)

    def rq_status(self, job_id: str, attempt: int) -> str | None:
        if not RQJob.exists(rq_job_id(job_id, attempt), connection=self.redis):
            return None
        status = RQJob.fetch(rq_job_id(job_id, attempt), connection=self.redis).get_status()
        return None if status is None else str(status.value)


@pytest.fixture
def env(settings: Settings) -> Iterator[Env]:
    settings = settings.model_copy(
        update={"reaper_lost_after_s": 20.0, "reaper_queued_grace_s": 2.0}
    )
    engine = make_engine(settings.resolved_database_url)
    redis = Redis.from_url(settings.redis_url)
    try:
        yield Env(settings, engine, redis)
    finally:
        redis.close()
        engine.dispose()


def test_a_lost_job_with_retries_left_is_queued_again_as_its_next_attempt(env: Env) -> None:
    job_id = env.job(max_retries=2)
    report = env.reap()

    assert report.retried == [job_id]
    job = env.get(job_id)
    assert (job.state, job.attempt, job.worker, job.started_at) == ("queued", 2, None, None)
    assert (job.exit_code, job.exit_reason, job.last_heartbeat) == (None, None, None)
    assert job.message is not None and "worker w:1 lost" in job.message
    assert env.rq_status(job_id, 2) == "queued"
    with session_scope(env.engine) as session:
        stmt = select(JobEvent).where(JobEvent.job_id == job_id).order_by(col(JobEvent.seq))
        last = session.exec(stmt).all()[-1]
    assert (last.kind, last.attempt) == ("state", 2)
    assert last.data["state"] == "queued" and last.data["retry_of"] == 1
    assert last.data["exit_reason"] == "worker_lost"
    assert env.reap() == ReapReport(), "a queued retry is left alone"


def test_a_lost_job_without_retries_fails_as_worker_lost(env: Env) -> None:
    job_id = env.job(max_retries=0, state=JobState.STARTING)
    assert env.reap().failed == [job_id]
    job = env.get(job_id)
    assert (job.state, job.exit_reason, job.attempt) == ("failed", "worker_lost", 1)
    assert job.finished_at is not None


def test_a_lost_cancelling_job_is_cancelled(env: Env) -> None:
    job_id = env.job(max_retries=3, state=JobState.CANCELLING)
    assert env.reap().cancelled == [job_id]
    job = env.get(job_id)
    assert (job.state, job.exit_reason, job.attempt) == ("cancelled", "cancelled", 1)


def test_a_job_that_heartbeats_is_left_alone(env: Env) -> None:
    job_id = env.job(max_retries=1)
    env.set_heartbeat(job_id, seconds_ago=5)
    assert env.reap() == ReapReport()
    assert env.get(job_id).state == "running"


def test_a_heartbeat_between_the_look_and_the_change_wins(env: Env) -> None:
    job_id = env.job(max_retries=1)
    cutoff = utcnow() - timedelta(seconds=20)
    env.set_heartbeat(job_id, seconds_ago=1)  # the worker answers just now
    with session_scope(env.engine) as session:
        assert (
            records.requeue_job(
                session, job_id, 1, exit_reason=ExitReason.WORKER_LOST, lost_before=cutoff
            )
            is None
        )
        assert not records.transition_job(
            session, job_id, JobState.FAILED, attempt=1, lost_before=cutoff
        )
    assert (env.get(job_id).state, env.get(job_id).attempt) == ("running", 1)


def test_reapers_at_once_retry_a_job_once(env: Env) -> None:
    job_ids = [env.job(max_retries=5) for _ in range(4)]
    reports: list[ReapReport] = []
    threads = [threading.Thread(target=lambda: reports.append(env.reap())) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    retried = sorted(job_id for report in reports for job_id in report.retried)
    assert retried == sorted(job_ids)
    assert {env.get(job_id).attempt for job_id in job_ids} == {2}


def test_the_policy_decides_which_failures_retry(env: Env) -> None:
    job_id = env.job(max_retries=1)
    with session_scope(env.engine) as session:
        for reason in (ExitReason.CANCELLED, ExitReason.TIMEOUT, ExitReason.LAUNCH_ERROR):
            assert records.requeue_job(session, job_id, 1, exit_reason=reason) is None
        retried = records.requeue_job(session, job_id, 1, exit_reason=ExitReason.HANG)
        assert retried is not None and retried.attempt == 2
        assert records.transition_job(session, job_id, JobState.STARTING, attempt=2)
        assert records.transition_job(session, job_id, JobState.RUNNING, attempt=2)
        # max_retries: 1 is used up
        assert records.requeue_job(session, job_id, 2, exit_reason=ExitReason.HANG) is None


def test_writes_of_a_superseded_attempt_are_refused(env: Env) -> None:
    job_id = env.job(max_retries=1)
    env.reap()
    seq = env.get(job_id).last_seq
    point = records.NewMetricPoint(1, 1, "loss", 0.5, time.time())
    with session_scope(env.engine) as session:
        with pytest.raises(records.AttemptSuperseded):
            records.append_metric_points(session, job_id, 1, [point])
        with pytest.raises(records.AttemptSuperseded):
            records.append_log_lines(session, job_id, 1, [records.NewLogLine(0, time.time(), "x")])
        with pytest.raises(records.AttemptSuperseded):
            records.register_checkpoint(
                session,
                job_id,
                1,
                path="checkpoints/x.pt",
                step=1,
                epoch=1,
                metrics={},
                size=1,
                sha256="0" * 64,
            )
        with pytest.raises(records.AttemptSuperseded):
            records.add_attempt_event(session, job_id, "restart", 1, {"restart": 1})
        assert records.touch_job_heartbeat(session, job_id, 1) is None
        assert not records.transition_job(session, job_id, JobState.FAILED, attempt=1)
        assert not records.transition_job(session, job_id, JobState.SUCCEEDED, attempt=1)
    job = env.get(job_id)
    assert (job.state, job.attempt, job.last_seq) == ("queued", 2, seq)


def test_queued_jobs_whose_queue_entry_vanished_are_enqueued_again(env: Env) -> None:
    old = env.job(max_retries=0, state=JobState.RUNNING)
    with session_scope(env.engine) as session:
        queued = records.create_job(session, JobSpec(name="q", recipe="synthetic"))
    env.redis.flushdb()  # Redis lost its data
    assert env.reap().enqueued == [], "a job just created has some slack"
    later = env.after_queued_grace()
    report = env.reap(now=later)
    assert report.enqueued == [queued.id]
    assert env.rq_status(queued.id, 1) == "queued"
    assert Queue("default", connection=env.redis).job_ids == [rq_job_id(queued.id, 1)]
    assert env.reap(now=later).enqueued == [], "enqueued once"
    assert env.get(old).state == "failed"  # lost meanwhile: no retries


def test_a_queued_job_whose_queue_entry_ended_is_enqueued_again(env: Env) -> None:
    with session_scope(env.engine) as session:
        job = records.create_job(session, JobSpec(name="q", recipe="synthetic"))
    enqueue_attempt(env.redis, job, grace_s=1)
    rq_job = RQJob.fetch(rq_job_id(job.id, 1), connection=env.redis)
    Queue("default", connection=env.redis).remove(rq_job)
    rq_job.set_status("failed")  # a work horse died before it took the job
    assert env.reap(now=env.after_queued_grace()).enqueued == [job.id]
    assert env.rq_status(job.id, 1) == "queued"


def test_launchbay_reaper_once(env: Env) -> None:
    job_id = env.job(max_retries=0)
    settings = env.settings
    command_env = {
        **os.environ,
        "LAUNCHBAY_DATA_DIR": str(settings.data_dir),
        "LAUNCHBAY_DATABASE_URL": settings.resolved_database_url,
        "LAUNCHBAY_REDIS_URL": settings.redis_url,
        "LAUNCHBAY_REAPER_LOST_AFTER_S": "10",
    }
    done = subprocess.run(
        [LAUNCHBAY, "reaper", "--once"], env=command_env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr.decode()
    job = env.get(job_id)
    assert (job.state, job.exit_reason) == ("failed", "worker_lost")


def test_a_queued_slurm_job_says_why_slurm_keeps_it_waiting(env: Env) -> None:
    """Slurm's reason (squeue's REASON) becomes the job's pending_reason while it is queued;
    a job no longer queued keeps none."""
    with session_scope(env.engine) as session:
        queued = records.create_job(session, JobSpec(name="waits", recipe="synthetic")).id
    running = env.job()

    for job_id in (queued, running):  # as SlurmExecutor.describe tells a PENDING allocation
        pending = [TaskStatus(job_id, live=True, pending_reason="Slurm: Resources")]
        note_pending(env.engine, env.get(job_id), pending)
    assert env.get(queued).pending_reason == "Slurm: Resources"
    assert env.get(running).pending_reason is None
    note_pending(env.engine, env.get(queued), [TaskStatus(queued, live=True)])
    assert env.get(queued).pending_reason is None
    # However long Slurm's reason, what is stored fits the column.
    long = [TaskStatus(queued, live=True, pending_reason="Slurm: " + "x" * 2000)]
    note_pending(env.engine, env.get(queued), long)
    assert env.get(queued).pending_reason == "Slurm: " + "x" * (512 - len("Slurm: "))
    # A look taken at an attempt since superseded changes nothing.
    stale = env.get(queued).model_copy(update={"attempt": 7, "pending_reason": None})
    note_pending(env.engine, stale, pending)
    assert (env.get(queued).pending_reason or "").startswith("Slurm: xxx")


class EndingExecutor:
    """An executor whose backend says how allocations end (as Slurm's does): `ends` by job."""

    name = "ending"
    reports_ends = True
    secret_env: frozenset[str] = frozenset()

    def __init__(self, ends: dict[str, TaskStatus]) -> None:
        self.ends = ends
        self.cancelled: list[str] = []

    def plan(self, job: Job) -> list[TaskPlan]:
        return [TaskPlan(job.id, job.id, job.attempt, None)]

    def dry_run(self, job: Job) -> DryRunPlan:
        return DryRunPlan(self.name, self.plan(job))

    def submit(self, job: Job) -> None:
        pass

    def describe(self, jobs: Sequence[Job]) -> dict[str, list[TaskStatus]]:
        return {j.id: [self.ends[j.id]] for j in jobs if j.id in self.ends}

    def resubmit(self, job: Job, task_ids: Sequence[str]) -> None:
        pass

    def cancel(self, job: Job) -> None:
        self.cancelled.append(job.id)


def test_every_executor_that_reports_ends_is_asked_about_its_jobs(env: Env) -> None:
    """An allocation that ended without its supervisor recording it ends the attempt as the
    backend tells; a cancelling job's live allocation is cancelled; a queued job shows the
    backend's reason. Jobs of the other queues are not asked about."""
    far = {"queue": "far"}
    with session_scope(env.engine) as session:
        waits = records.create_job(session, JobSpec(name="w", recipe="synthetic", **far)).id
        here = records.create_job(session, JobSpec(name="h", recipe="synthetic")).id
    ended, cancelling = env.job(), env.job(state=JobState.CANCELLING)
    with session_scope(env.engine) as session:
        session.execute(update(Job).where(col(Job.id).in_([ended, cancelling])).values(queue="far"))
        session.commit()
    end = TaskEnd(JobState.FAILED, ExitReason.TIMEOUT, "the allocation hit its time limit")
    backend = EndingExecutor(
        {
            waits: TaskStatus(waits, live=True, pending_reason="Far: Resources"),
            ended: TaskStatus(ended, live=False, ended=end),
            cancelling: TaskStatus(cancelling, live=True),
            here: TaskStatus(here, live=False, ended=end),
        }
    )
    default = RQExecutor(env.redis, grace_s=1)
    report = reap_once(env.engine, RoutingExecutor(default, {"far": backend}), env.settings)

    assert report.failed == [ended]
    job = env.get(ended)
    assert (job.state, job.exit_reason, job.message) == ("failed", "timeout", end.message)
    assert backend.cancelled == [cancelling]
    assert env.get(waits).pending_reason == "Far: Resources"
    assert env.get(here).state == "queued", "the default executor's jobs are not its"
