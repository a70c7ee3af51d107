"""What a running attempt outputs: log lines and metric points, and the job's progress."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, insert, update
from sqlmodel import Session, col, select

from jobs.contract.system_metrics import is_system_metric
from jobs.states import ACTIVE_STATES
from service.models import LogLine, MetricPoint
from service.records.lifecycle import JOB_TABLE, AttemptSuperseded
from service.records.metric_rollups import RollupPoint, add_to_rollups


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
    max_log_bytes: int | None = None,
) -> None:
    """Insert log lines and metric points in one transaction and move the job's progress and
    latest values forward. `progress` holds other Job columns to set (e.g. total_steps). Past
    `max_log_bytes` stored for the job, log lines are counted, not stored (`cap_log_lines`).

    The worker calls this several times a second beside busy ranks, so it is a few prebuilt
    Core statements (no ORM, no statement built per call): the job row is read and its seqs
    reserved in one UPDATE … RETURNING, the rows inserted in bulk, the rollups upserted, and
    the job's counters, progress and latest values set in one more UPDATE.

    AttemptSuperseded, writing nothing, unless the job is active at `attempt`."""
    if not logs and not points:
        return
    job_values: dict[str, Any] = {}
    if logs:
        logs, job_values = cap_log_lines(session, job_id, logs, max_log_bytes)
    if not logs and not points:
        session.execute(update(JOB_TABLE).where(JOB_TABLE.c.id == job_id).values(**job_values))
        session.commit()
        return
    first, latest = _reserve(session, job_id, attempt, len(logs) + len(points))
    if logs:
        session.execute(
            _INSERT_LOG_LINES,
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
        _insert_points(session, job_id, attempt, first + len(logs), points)
        job_values |= _progress_values(latest, points, progress)
    if job_values:
        session.execute(update(JOB_TABLE).where(JOB_TABLE.c.id == job_id).values(**job_values))
    session.commit()


def _reserve(session: Session, job_id: str, attempt: int, count: int) -> tuple[int, Any]:
    """`allocate_seq` that also returns the job's latest metric values: (first seq, latest)."""
    row = session.execute(
        _RESERVE, {"for_job": job_id, "for_attempt": attempt, "reserved": count}
    ).one_or_none()
    if row is None:
        session.rollback()
        raise AttemptSuperseded(f"job {job_id} is no longer run by attempt {attempt}")
    return int(row.last_seq) - count + 1, row.latest_metrics


def _insert_points(
    session: Session,
    job_id: str,
    attempt: int,
    first: int,
    points: Sequence[NewMetricPoint],
) -> None:
    """The metric points at seqs from `first`, and their rollups."""
    session.execute(
        _INSERT_METRIC_POINTS,
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
    add_to_rollups(
        session,
        job_id,
        [
            RollupPoint(first + i, p.name, p.value, p.step, p.epoch, p.ts, attempt)
            for i, p in enumerate(points)
        ],
    )


def _progress_values(
    latest: dict[str, Any] | None,
    points: Sequence[NewMetricPoint],
    progress: dict[str, Any] | None,
) -> dict[str, Any]:
    """The job's latest values and progress after `points`: the program's own metrics only
    (system metrics, `jobs.contract.system_metrics`, move neither)."""
    values: dict[str, Any] = dict(progress or {})
    own = [p for p in points if not is_system_metric(p.name)]
    if not own:
        return values
    values["latest_metrics"] = {**(latest or {}), **{p.name: p.value for p in own}}
    last = own[-1]
    if last.step is not None:
        values["progress_step"] = last.step
    if last.epoch is not None:
        values["progress_epoch"] = last.epoch
    return values


# Built once: building a statement (and its cache key) per call was a fifth of a write.
_INSERT_LOG_LINES = insert(LogLine.__table__)  # type: ignore[attr-defined]
_INSERT_METRIC_POINTS = insert(MetricPoint.__table__)  # type: ignore[attr-defined]
_RESERVE = (
    update(JOB_TABLE)
    .where(
        JOB_TABLE.c.id == bindparam("for_job"),
        JOB_TABLE.c.attempt == bindparam("for_attempt"),
        JOB_TABLE.c.state.in_(list(ACTIVE_STATES)),
    )
    .values(last_seq=JOB_TABLE.c.last_seq + bindparam("reserved"))
    .returning(JOB_TABLE.c.last_seq, JOB_TABLE.c.latest_metrics)
)
_LOG_BYTES = select(JOB_TABLE.c.log_bytes).where(JOB_TABLE.c.id == bindparam("job_id"))


def list_log_lines(
    session: Session,
    job_id: str,
    *,
    rank: int | None,
    after: int,
    limit: int,
    node: int | None = None,
    before: int | None = None,
    newest_first: bool = False,
) -> list[LogLine]:
    """Lines with `after < seq < before`, oldest first, or the newest `limit` of them newest
    first (a job's tail, then older pages with `before` = the oldest seq seen)."""
    stmt = select(LogLine).where(LogLine.job_id == job_id, col(LogLine.seq) > after)
    if before is not None:
        stmt = stmt.where(col(LogLine.seq) < before)
    if rank is not None:
        stmt = stmt.where(LogLine.rank == rank)
    if node is not None:
        stmt = stmt.where(LogLine.node == node)
    order = col(LogLine.seq).desc() if newest_first else col(LogLine.seq)
    return list(session.exec(stmt.order_by(order).limit(limit)).all())


def list_metric_points(
    session: Session, job_id: str, *, name: str | None, after: int, limit: int
) -> list[MetricPoint]:
    stmt = select(MetricPoint).where(MetricPoint.job_id == job_id, col(MetricPoint.seq) > after)
    if name is not None:
        stmt = stmt.where(MetricPoint.name == name)
    return list(session.exec(stmt.order_by(col(MetricPoint.seq)).limit(limit)).all())


LOG_CAP_NOTICE = (
    "[launchbay] this job stored its limit of {limit} log bytes; further lines are counted, "
    "not stored"
)


def cap_log_lines(
    session: Session, job_id: str, logs: Sequence[NewLogLine], max_log_bytes: int | None
) -> tuple[Sequence[NewLogLine], dict[str, Any]]:
    """The lines to store under the job's log cap, and the job's column values that count
    their bytes (for the caller's update of the job). The lines past the cap are counted in
    `Job.log_lines_dropped`; when a job first reaches the cap, a line saying so takes the
    place of the first line dropped."""
    stored = session.execute(_LOG_BYTES, {"job_id": job_id}).scalar_one_or_none() or 0
    kept: list[NewLogLine] = []
    used = 0
    dropped = 0
    for line in logs:
        size = len(line.line.encode())
        if max_log_bytes is None or stored + used + size <= max_log_bytes:
            kept.append(line)
            used += size
        elif stored + used <= max_log_bytes:
            notice = LOG_CAP_NOTICE.format(limit=max_log_bytes)
            kept.append(NewLogLine(rank=line.rank, ts=line.ts, line=notice, node=line.node))
            # The notice is counted past the cap, so it is written once.
            used = max_log_bytes - stored + 1
            dropped += 1
        else:
            dropped += 1
    values: dict[str, Any] = {"log_bytes": JOB_TABLE.c.log_bytes + used}
    if dropped:
        values["log_lines_dropped"] = JOB_TABLE.c.log_lines_dropped + dropped
    return kept, values
