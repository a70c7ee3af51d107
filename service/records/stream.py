"""A job's live stream: everything it recorded, in seq order."""

from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, col, select

from jobs.states import JobState
from service.models import Checkpoint, Job, JobEvent, LogLine, MetricPoint

StreamRow = JobEvent | MetricPoint | LogLine | Checkpoint


@dataclass(frozen=True)
class StreamRead:
    """Rows with `after < seq <= cursor` in seq order, and whether the job had ended when
    read (then an empty read means nothing more will come)."""

    rows: list[StreamRow]
    cursor: int
    ended: bool


def read_stream(session: Session, job_id: str, *, after: int, window: int = 500) -> StreamRead:
    """What a job recorded after `after` (at most `window` seqs): its live stream.

    Every seq up to the job's `last_seq` is committed once `last_seq` is visible (they are
    written in one transaction), so reading up to it leaves no gap a later read could fill.
    LookupError when the job no longer exists.
    """
    found = session.exec(select(Job.last_seq, Job.state).where(Job.id == job_id)).first()
    if found is None:
        raise LookupError(f"job {job_id} no longer exists")
    last_seq, state = found
    ended = JobState(state).is_terminal()
    if last_seq <= after:
        return StreamRead([], after, ended)
    upper = min(int(last_seq), after + window)
    rows: list[StreamRow] = []
    tables: tuple[Any, ...] = (JobEvent, MetricPoint, LogLine, Checkpoint)
    for table in tables:
        stmt = select(table).where(
            col(table.job_id) == job_id, col(table.seq) > after, col(table.seq) <= upper
        )
        rows.extend(session.exec(stmt).all())
    rows.sort(key=lambda row: row.seq)
    return StreamRead(rows, upper, ended)


def list_job_events(
    session: Session, job_id: str, *, up_to: int, limit: int = 10_000
) -> list[JobEvent]:
    """The job's event rows (state changes, restarts, retired checkpoints) with seq ≤ `up_to`,
    in seq order."""
    stmt = (
        select(JobEvent)
        .where(JobEvent.job_id == job_id, col(JobEvent.seq) <= up_to)
        .order_by(col(JobEvent.seq))
    )
    return list(session.exec(stmt.limit(limit)).all())
