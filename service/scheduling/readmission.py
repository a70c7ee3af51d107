"""An admission that led to no run: the job was reserved on a worker that went away before it
took the attempt (frozen, killed, its record expired, Redis lost with its task). The job goes
back to the queue as its next attempt, in the dispatcher's transaction, and is admitted again
like any other.

A new attempt, not the same one again, because the attempt is what every worker-side change is
conditional on (`service.records.take_job`, `join_node`, heartbeats): the old worker's task, if
that worker comes back, takes nothing, so the job never runs twice. The new attempt uses none
of `max_retries` (the job's `lost_admissions` counts them, as `preemptions` does preemptions).
"""

from sqlalchemy import update
from sqlmodel import Session, col

from jobs.states import ExitReason, JobState
from service.models import Job
from service.records.lifecycle import JOB_TABLE, insert_state_event


def requeue_admission(session: Session, job_id: str, attempt: int, why: str) -> int | None:
    """Queue the job, still `queued` at `attempt` though admitted, as attempt + 1 with a
    `queued` state event saying `why` (not committed). Returns the new attempt; None, having
    changed nothing, when the job is no longer queued at `attempt` (a worker took it)."""
    note = f"attempt {attempt} {why}; queued again as attempt {attempt + 1} (no retry used)"
    stmt = (
        update(JOB_TABLE)
        .where(
            col(Job.id) == job_id,
            col(Job.attempt) == attempt,
            col(Job.state) == JobState.QUEUED,
        )
        .values(
            attempt=attempt + 1,
            lost_admissions=col(Job.lost_admissions) + 1,
            message=note,
            last_seq=col(Job.last_seq) + 1,  # the `queued` event's
        )
        .returning(col(Job.last_seq))
    )
    seq = session.execute(stmt).scalar_one_or_none()
    if seq is None:
        return None
    detail = {
        "retry_of": attempt,
        "exit_code": None,
        "exit_reason": str(ExitReason.WORKER_LOST),
        "message": f"attempt {attempt} {why}",
    }
    insert_state_event(session, job_id, JobState.QUEUED, attempt + 1, int(seq), detail)
    return attempt + 1


def lost_worker_note(workers: list[str]) -> str:
    """`why` for `requeue_admission`: the workers that went away."""
    names = sorted(set(workers))
    which = f"worker {names[0]}" if len(names) == 1 else f"workers {', '.join(names)}"
    return f"was admitted on {which}, which went away before taking it"
