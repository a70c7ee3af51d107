"""How a preemption travels: the dispatcher moves the running job to `cancelling` (the one
channel its supervisor reads) with a message naming the job it makes room for; the
supervisor, seeing that message, records the attempt as `preempted`, which queues the job
again as its next attempt without using a retry (`service.records.lifecycle.requeue`)."""

from sqlmodel import Session, select

from jobs.states import JobState
from service.models import Job

PREEMPTED_MESSAGE = "preempted by job"


def preemption_message(for_job: str) -> str:
    return f"{PREEMPTED_MESSAGE} {for_job}"


def is_preemption(state: JobState | None, message: str | None) -> bool:
    return state is JobState.CANCELLING and (message or "").startswith(PREEMPTED_MESSAGE)


def preemption_of(session: Session, job_id: str, attempt: int) -> str | None:
    """The preemption message of the job's attempt, if it is being preempted."""
    row = session.exec(
        select(Job.state, Job.message).where(Job.id == job_id, Job.attempt == attempt)
    ).first()
    if row is None or not is_preemption(JobState(row[0]), row[1]):
        return None
    return row[1]
