"""Ranks' stacks: the request for them (a column of the job's row, read by the attempt's
supervisor with its state), and the stacks it records."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert
from sqlmodel import Session, col, select

from jobs.states import JobState
from service.models import Job, RankStack


@dataclass(frozen=True)
class JobSignals:
    """What a running attempt's supervisor reads from the job's row every 0.5 s."""

    state: JobState | None
    stacks_requested_at: datetime | None


def read_job_signals(session: Session, job_id: str, attempt: int) -> JobSignals:
    """The job's state (None when it is no longer at `attempt`) and its latest stack request."""
    stmt = select(col(Job.state), col(Job.stacks_requested_at)).where(
        col(Job.id) == job_id, col(Job.attempt) == attempt
    )
    row = session.exec(stmt).first()
    if row is None:
        return JobSignals(None, None)
    return JobSignals(JobState(row[0]), row[1])


@dataclass(frozen=True)
class NewRankStack:
    rank: int
    stack: str
    in_collective: bool
    last_output_ts: float | None


def record_stacks(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    node: int,
    ts: float,
    reason: str,
    stacks: Sequence[NewRankStack],
) -> None:
    """One capture of the ranks of one node (they share `ts`), committed."""
    if not stacks:
        return
    session.execute(
        insert(RankStack),
        [
            {
                "job_id": job_id,
                "attempt": attempt,
                "rank": s.rank,
                "node": node,
                "ts": ts,
                "reason": reason,
                "stack": s.stack,
                "in_collective": s.in_collective,
                "last_output_ts": s.last_output_ts,
            }
            for s in stacks
        ],
    )
    session.commit()
