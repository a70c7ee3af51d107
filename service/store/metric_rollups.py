"""A metric's chart in bounded time: per-bucket minimum and maximum kept as points are written,
and the downsampled series read back from them (`GET …/metrics?max_points=N`).

A bucket holds the seqs `[bucket * width, (bucket + 1) * width)` of a job; `WIDTHS` go from
fine to coarse by a factor of 4. A read of at most N points picks the finest width whose
buckets up to the job's last seq number at most N, merges neighbouring buckets into at most
N / 2 groups (each gives its minimum and its maximum point), then fetches those points by seq:
at most N rollup rows and N index lookups, whatever the job's length, for a chart of N / 2 to
N points. (Allowing 2N rollup rows keeps charts nearer N points but reads up to four times the
rows: docs/benchmarks.md, "Flat costs", F4.) Series with at most N points are answered
as they are.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, case, delete, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from service.models import MetricPoint, MetricRollup

WIDTHS = tuple(64 * 4**k for k in range(9))  # 64 … 4,194,304 seqs
POINT_COLUMNS = tuple(
    getattr(MetricPoint, name)
    for name in ("seq", "step", "epoch", "name", "value", "ts", "attempt")
)
MAX_IDS_PER_QUERY = 900


@dataclass(frozen=True)
class RollupPoint:
    seq: int
    name: str
    value: float


def add_to_rollups(session: Session, job_id: str, points: Sequence[RollupPoint]) -> None:
    """Fold `points` into the job's rollups (not committed): one upsert per touched bucket."""
    merged: dict[tuple[str, int, int], dict[str, Any]] = {}
    for point in points:
        if point.value != point.value:  # NaN has no order: not a minimum nor a maximum
            continue
        for width in WIDTHS:
            key = (point.name, width, point.seq // width)
            row = merged.get(key)
            if row is None:
                merged[key] = {
                    "job_id": job_id,
                    "name": point.name,
                    "width": width,
                    "bucket": point.seq // width,
                    "min_value": point.value,
                    "min_seq": point.seq,
                    "max_value": point.value,
                    "max_seq": point.seq,
                }
                continue
            if point.value < row["min_value"]:
                row["min_value"], row["min_seq"] = point.value, point.seq
            if point.value > row["max_value"]:
                row["max_value"], row["max_seq"] = point.value, point.seq
    if merged:
        session.execute(_upsert(session), list(merged.values()))


def _upsert(session: Session) -> Any:
    """INSERT … ON CONFLICT that keeps the smaller minimum and the larger maximum."""
    dialect = session.get_bind().dialect.name
    stmt: Any = (postgresql if dialect == "postgresql" else sqlite).insert(MetricRollup)
    table = MetricRollup.__table__  # type: ignore[attr-defined]
    new = stmt.excluded
    lower = new.min_value < table.c.min_value
    higher = new.max_value > table.c.max_value
    return stmt.on_conflict_do_update(
        index_elements=["job_id", "width", "name", "bucket"],
        set_={
            "min_value": case((lower, new.min_value), else_=table.c.min_value),
            "min_seq": case((lower, new.min_seq), else_=table.c.min_seq),
            "max_value": case((higher, new.max_value), else_=table.c.max_value),
            "max_seq": case((higher, new.max_seq), else_=table.c.max_seq),
        },
    )


def metric_names(session: Session, job_id: str) -> list[str]:
    """The names of the job's metrics, from the coarsest rollups (a few rows per name)."""
    stmt = select(MetricRollup.name).where(
        MetricRollup.job_id == job_id, MetricRollup.width == WIDTHS[-1]
    )
    names = set(session.exec(stmt.distinct()).all())
    if not names:  # points written before rollups were kept
        names = set(
            session.exec(
                select(MetricPoint.name).where(MetricPoint.job_id == job_id).distinct()
            ).all()
        )
    return sorted(names)


def downsample(
    session: Session, job_id: str, name: str, *, last_seq: int, max_points: int
) -> list[Row[Any]]:
    """At most `max_points` points of one metric with seq ≤ `last_seq`, in seq order: every
    point if there are that few, else each bucket's minimum and maximum. Rows of
    `POINT_COLUMNS`, not ORM objects: a chart has thousands of points, and an ORM object
    costs tens of microseconds to make."""
    series = (
        MetricPoint.job_id == job_id,
        MetricPoint.name == name,
        col(MetricPoint.seq) <= last_seq,
    )
    base = select(*POINT_COLUMNS).where(*series)
    # Whether the series fits, counted on its index without reading more than N + 1 rows.
    head = select(MetricPoint.seq).where(*series).limit(max_points + 1).subquery()
    if session.exec(select(func.count()).select_from(head)).one() <= max_points:
        return list(session.execute(base.order_by(col(MetricPoint.seq))).all())
    buckets = max(1, max_points // 2)
    # The finest width with at most twice the buckets wanted, merged below to `buckets`.
    width = next((w for w in WIDTHS if last_seq // w + 1 <= 2 * buckets), WIDTHS[-1])
    stmt = select(
        MetricRollup.min_value, MetricRollup.min_seq, MetricRollup.max_value, MetricRollup.max_seq
    ).where(MetricRollup.job_id == job_id, MetricRollup.width == width, MetricRollup.name == name)
    rows = session.exec(stmt.order_by(col(MetricRollup.bucket))).all()
    if not rows:  # points written before rollups were kept: bucket them here
        return _downsample_scan(session, base, last_seq, buckets)
    step = -(-len(rows) // buckets)
    wanted: set[int] = set()
    for start in range(0, len(rows), step):
        # Extremes written after `last_seq` was read are left out (the stream brings them).
        lows = [(v, seq) for v, seq, _, _ in rows[start : start + step] if seq <= last_seq]
        highs = [(v, seq) for _, _, v, seq in rows[start : start + step] if seq <= last_seq]
        if lows:
            wanted.add(min(lows)[1])
        if highs:
            wanted.add(max(highs)[1])
    ordered = sorted(wanted)
    points: list[Row[Any]] = []
    for start in range(0, len(ordered), MAX_IDS_PER_QUERY):
        chunk = ordered[start : start + MAX_IDS_PER_QUERY]
        stmt_points = select(*POINT_COLUMNS).where(
            MetricPoint.job_id == job_id, col(MetricPoint.seq).in_(chunk)
        )
        points += session.execute(stmt_points).all()
    return sorted(points, key=lambda p: p.seq)


def _downsample_scan(session: Session, base: Any, last_seq: int, buckets: int) -> list[Row[Any]]:
    """The same answer read from every point (for points stored without rollups)."""
    width = last_seq // buckets + 1
    chosen: dict[int, tuple[Row[Any], Row[Any]]] = {}
    for point in session.execute(base.order_by(col(MetricPoint.seq))):
        bucket = point.seq // width
        low, high = chosen.get(bucket, (point, point))
        chosen[bucket] = (
            point if point.value < low.value else low,
            point if point.value > high.value else high,
        )
    kept = {p.seq: p for pair in chosen.values() for p in pair}
    return [kept[seq] for seq in sorted(kept)]


def delete_rollups(session: Session, job_ids: Sequence[str]) -> None:
    session.execute(delete(MetricRollup).where(col(MetricRollup.job_id).in_(job_ids)))
