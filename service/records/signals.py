"""What an attempt's supervisor reads from the job's row besides its state: the request for
the ranks' stacks (and the stacks it records), and whether an event stream watches the job."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import insert, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from jobs.states import ACTIVE_STATES, JobState
from service.models import Job, RankStack
from service.models.columns import utcnow

# A mark younger than this says an event stream watches the job: several of the API's marks
# (`service.stream_notifier.WATCH_MARK_S`), and room for the clocks of two hosts to differ.
WATCHED_FOR = timedelta(seconds=10)


@dataclass(frozen=True)
class JobSignals:
    """What a running attempt's supervisor reads from the job's row every 0.5 s."""

    state: JobState | None
    stacks_requested_at: datetime | None
    watched_at: datetime | None = None

    def watched(self) -> bool:
        """Whether an event stream watched the job lately."""
        return self.watched_at is not None and utcnow() - self.watched_at < WATCHED_FOR


def read_job_signals(session: Session, job_id: str, attempt: int) -> JobSignals:
    """The job's state (None when it is no longer at `attempt`), its latest stack request and
    when a stream last watched it."""
    stmt = select(col(Job.state), col(Job.stacks_requested_at), col(Job.watched_at)).where(
        col(Job.id) == job_id, col(Job.attempt) == attempt
    )
    row = session.exec(stmt).first()
    if row is None:
        return JobSignals(None, None)
    return JobSignals(JobState(row[0]), row[1], row[2])


def mark_watched(engine: Engine, job_ids: Sequence[str]) -> None:
    """Note that event streams watch `job_ids` now (those still active; one statement)."""
    with engine.begin() as connection:
        connection.execute(
            update(Job)
            .where(col(Job.id).in_(job_ids), col(Job.state).in_(ACTIVE_STATES))
            .values(watched_at=utcnow())
        )


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
