"""What a running attempt outputs: log lines and metric points, and the job's progress."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, update
from sqlmodel import Session, col, select

from service.models import Job, LogLine, MetricPoint
from service.store.lifecycle import JOB_TABLE, allocate_seq


@dataclass(frozen=True)
class NewLogLine:
    rank: int
    ts: float
    line: str
    node: int = 0


def append_log_lines(
    session: Session, job_id: str, attempt: int, lines: Sequence[NewLogLine]
) -> None:
    append_output(session, job_id, attempt, logs=lines)


@dataclass(frozen=True)
class NewMetricPoint:
    step: int | None
    epoch: int | None
    name: str
    value: float
    ts: float


def append_metric_points(
    session: Session,
    job_id: str,
    attempt: int,
    points: Sequence[NewMetricPoint],
    *,
    progress: dict[str, Any] | None = None,
) -> None:
    append_output(session, job_id, attempt, points=points, progress=progress)


def append_output(
    session: Session,
    job_id: str,
    attempt: int,
    *,
    logs: Sequence[NewLogLine] = (),
    points: Sequence[NewMetricPoint] = (),
    progress: dict[str, Any] | None = None,
) -> None:
    """Insert log lines and metric points in one transaction (bulk inserts: the worker calls
    this several times a second beside busy ranks) and move the job's progress and latest
    values forward. `progress` holds other Job columns to set (e.g. total_steps).

    AttemptSuperseded, writing nothing, unless the job is active at `attempt`."""
    if not logs and not points:
        return
    first = allocate_seq(session, job_id, len(logs) + len(points), attempt=attempt)
    if logs:
        session.execute(
            insert(LogLine),
            [
                {
                    "job_id": job_id,
                    "seq": first + i,
                    "attempt": attempt,
                    "rank": ln.rank,
                    "node": ln.node,
                    "ts": ln.ts,
                    "line": ln.line,
                }
                for i, ln in enumerate(logs)
            ],
        )
    if points:
        _insert_points(session, job_id, attempt, first + len(logs), points, progress)
    session.commit()


def _insert_points(
    session: Session,
    job_id: str,
    attempt: int,
    first: int,
    points: Sequence[NewMetricPoint],
    progress: dict[str, Any] | None,
) -> None:
    """The metric points at seqs from `first`, and the job's progress and latest values."""
    session.execute(
        insert(MetricPoint),
        [
            {
                "job_id": job_id,
                "seq": first + i,
                "attempt": attempt,
                "step": p.step,
                "epoch": p.epoch,
                "name": p.name,
                "value": p.value,
                "ts": p.ts,
            }
            for i, p in enumerate(points)
        ],
    )
    latest = session.exec(select(Job.latest_metrics).where(Job.id == job_id)).one()
    values: dict[str, Any] = {
        "latest_metrics": {**(latest or {}), **{p.name: p.value for p in points}},
        **(progress or {}),
    }
    last = points[-1]
    if last.step is not None:
        values["progress_step"] = last.step
    if last.epoch is not None:
        values["progress_epoch"] = last.epoch
    session.execute(update(JOB_TABLE).where(col(Job.id) == job_id).values(**values))


def list_log_lines(
    session: Session,
    job_id: str,
    *,
    rank: int | None,
    after: int,
    limit: int,
    node: int | None = None,
) -> list[LogLine]:
    stmt = select(LogLine).where(LogLine.job_id == job_id, col(LogLine.seq) > after)
    if rank is not None:
        stmt = stmt.where(LogLine.rank == rank)
    if node is not None:
        stmt = stmt.where(LogLine.node == node)
    return list(session.exec(stmt.order_by(col(LogLine.seq)).limit(limit)).all())


def list_metric_points(
    session: Session, job_id: str, *, name: str | None, after: int, limit: int
) -> list[MetricPoint]:
    stmt = select(MetricPoint).where(MetricPoint.job_id == job_id, col(MetricPoint.seq) > after)
    if name is not None:
        stmt = stmt.where(MetricPoint.name == name)
    return list(session.exec(stmt.order_by(col(MetricPoint.seq)).limit(limit)).all())
