"""Every rank's Python stack: asked for now (`POST`), or read back (`GET`), also those
recorded when the hang watchdog stopped the job. The worker records them (`worker.stacks`)."""

from typing import Annotated

from fastapi import APIRouter, Query, status
from pydantic import BaseModel
from sqlalchemy import update
from sqlmodel import col, select

from jobs.states import ACTIVE_STATES
from service.deps import OwnedJob, SessionDep
from service.errors import InvalidTransition
from service.models import Job, RankStack, utcnow
from service.stack_summary import StackSummary, summarize

router = APIRouter(prefix="/v1/jobs", tags=["stacks"])
# The states in which a job has ranks to look at.


class RankStackPublic(BaseModel):
    rank: int
    node: int
    ts: float
    reason: str
    stack: str
    attempt: int
    in_collective: bool
    last_output_ts: float | None

    @classmethod
    def from_row(cls, row: RankStack) -> "RankStackPublic":
        return cls(
            rank=row.rank,
            node=row.node,
            ts=row.ts,
            reason=row.reason,
            stack=row.stack,
            attempt=row.attempt,
            in_collective=row.in_collective,
            last_output_ts=row.last_output_ts,
        )


class RankStacksPublic(BaseModel):
    items: list[RankStackPublic]
    # The latest capture read as a whole; None when nothing was recorded.
    summary: StackSummary | None


class StacksRequested(BaseModel):
    job_id: str
    requested_at: str


@router.post(
    "/{job_id}/stacks", status_code=status.HTTP_202_ACCEPTED, response_model=StacksRequested
)
def request_stacks(job: OwnedJob, session: SessionDep) -> StacksRequested:
    """Ask the job's supervisor (which reads the job's row every 0.5 s) to record every rank's
    stack now; they appear at GET within a second or two."""
    now = utcnow()
    done = session.execute(
        update(Job)
        .where(col(Job.id) == job.id, col(Job.state).in_(ACTIVE_STATES))
        .values(stacks_requested_at=now)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    if done.rowcount != 1:  # type: ignore[attr-defined]
        raise InvalidTransition(
            f"job {job.id} is {job.state}: only a running job's stacks can be recorded",
            detail={"job_id": job.id, "state": str(job.state)},
        )
    return StacksRequested(job_id=job.id, requested_at=now.isoformat())


@router.get("/{job_id}/stacks", response_model=RankStacksPublic)
def get_stacks(
    job: OwnedJob,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> RankStacksPublic:
    """The recorded stacks, newest capture first, ranks in order within one."""
    stmt = (
        select(RankStack)
        .where(RankStack.job_id == job.id)
        .order_by(col(RankStack.ts).desc(), col(RankStack.rank))
        .limit(limit)
    )
    rows = list(session.exec(stmt).all())
    return RankStacksPublic(
        items=[RankStackPublic.from_row(r) for r in rows], summary=summarize(rows)
    )
