"""Every state change the store makes is a move of the transition table
(`jobs.states.ALLOWED_TRANSITIONS`): the lifecycle functions are driven through each path a
job takes (cancels, retries, a preemption, a cancel that a lost worker ends), on a real
database, and the job's state events read back; a move the table forbids raises."""

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from jobs.spec import JobSpec
from jobs.states import ALLOWED_TRANSITIONS, ExitReason, ForbiddenTransition, JobState
from service import records
from service.models import Job, JobEvent
from service.records.lifecycle import move
from service.scheduling.preemption import preemption_message

Q, S, R, C = JobState.QUEUED, JobState.STARTING, JobState.RUNNING, JobState.CANCELLING


def new_job(session: Session, max_retries: int = 0) -> str:
    spec = JobSpec(name="moves", recipe="synthetic", max_retries=max_retries)
    return records.create_job(session, spec).id


def run(session: Session, job_id: str, attempt: int) -> None:
    assert records.take_job(session, job_id, attempt, worker="w:1") is not None
    assert records.transition_job(session, job_id, R, attempt=attempt)


def end(session: Session, job_id: str, attempt: int, state: JobState, why: ExitReason) -> None:
    assert records.commit_end(
        session, records.end_attempt(session, job_id, attempt, state, exit_reason=why)
    ).recorded


def states_of(session: Session, job_id: str) -> list[JobState]:
    rows = session.exec(
        select(JobEvent)
        .where(JobEvent.job_id == job_id, JobEvent.kind == "state")
        .order_by(col(JobEvent.seq))
    ).all()
    return [JobState(row.data["state"]) for row in rows]


def drive_every_path(session: Session) -> list[list[JobState]]:
    cancelled_queued = new_job(session)
    assert records.transition_job(session, cancelled_queued, JobState.CANCELLED, attempt=1)

    retried = new_job(session, max_retries=1)  # fails, is retried, fails for good
    run(session, retried, 1)
    end(session, retried, 1, JobState.FAILED, ExitReason.USER_ERROR)
    run(session, retried, 2)
    end(session, retried, 2, JobState.FAILED, ExitReason.USER_ERROR)

    preempted = new_job(session)  # stopped through cancelling, queued again, then succeeds
    run(session, preempted, 1)
    assert records.transition_job(
        session, preempted, C, attempt=1, message=preemption_message("other")
    )
    end(session, preempted, 1, JobState.FAILED, ExitReason.PREEMPTED)
    run(session, preempted, 2)
    end(session, preempted, 2, JobState.SUCCEEDED, ExitReason.COMPLETED)

    cancelled = new_job(session)  # a cancel while starting, recorded by way of cancelling
    assert records.take_job(session, cancelled, 1, worker="w:1") is not None
    end(session, cancelled, 1, JobState.CANCELLED, ExitReason.CANCELLED)

    lost = new_job(session, max_retries=3)  # a cancelling job is not retried when lost
    run(session, lost, 1)
    assert records.transition_job(session, lost, C, attempt=1)
    end(session, lost, 1, JobState.FAILED, ExitReason.WORKER_LOST)
    jobs = [cancelled_queued, retried, preempted, cancelled, lost]
    return [states_of(session, job_id) for job_id in jobs]


def test_every_move_the_lifecycle_makes_is_in_the_table(engine: Engine) -> None:
    with Session(engine, expire_on_commit=False) as session:
        paths = drive_every_path(session)
    assert paths == [
        [Q, JobState.CANCELLED],
        [Q, S, R, Q, S, R, JobState.FAILED],
        [Q, S, R, C, Q, S, R, JobState.SUCCEEDED],
        [Q, S, C, JobState.CANCELLED],
        [Q, S, R, C, JobState.FAILED],
    ]
    moves = {(a, b) for path in paths for a, b in zip(path, path[1:], strict=False)}
    assert (C, Q) in moves
    assert all(b in ALLOWED_TRANSITIONS[a] for a, b in moves), moves


def test_a_move_the_table_forbids_raises_and_writes_nothing(engine: Engine) -> None:
    with Session(engine, expire_on_commit=False) as session:
        job_id = new_job(session)
        assert records.transition_job(session, job_id, JobState.CANCELLED, attempt=1)
        with pytest.raises(ForbiddenTransition, match="cancelled to queued"):
            move(session, job_id, Q, 1, None, {}, sources=[JobState.CANCELLED])
        session.rollback()
        assert not records.transition_job(session, job_id, Q, attempt=1)
        job = session.get(Job, job_id)
        assert job is not None and job.state == JobState.CANCELLED
        assert states_of(session, job_id) == [Q, JobState.CANCELLED]
