"""A metric's chart in bounded time: per-bucket minimum and maximum kept as points are written,
and the downsampled series read back from them (`GET …/metrics?max_points=N`).

A bucket holds the seqs `[bucket * width, (bucket + 1) * width)` of a job; `WIDTHS` go from
fine to coarse by a factor of 4. A read of at most N points picks the finest width whose
buckets up to the job's last seq number at most N, merges neighbouring buckets into at most
N / 2 groups (each gives its minimum and its maximum point): at most N rollup rows, whatever
the job's length, for a chart of N / 2 to N points. A rollup row keeps its two extremes whole
(seq, step, epoch, value, ts, attempt), so the chart reads no point row. (Allowing 2N
rollup rows keeps charts nearer N points but reads up to four times the rows:
docs/benchmarks.md, "Flat costs", F4.) Series with at most N points are answered as they are.
"""

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Row, case, delete, func
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from service.models import MetricPoint, MetricRollup

WIDTHS = tuple(64 * 4**k for k in range(9))  # 64 … 4,194,304 seqs
# A range of fewer than this many seqs per point asked is downsampled from its points, not the
# rollups (whose finest buckets would give it fewer points than asked): at most 8 rows a point.
SCAN_SPAN = 8
POINT_COLUMNS = tuple(
    getattr(MetricPoint, name)
    for name in ("seq", "step", "epoch", "name", "value", "ts", "attempt")
)
# What a rollup row keeps of each extreme besides its value and seq.
EXTREME_FIELDS = ("step", "epoch", "ts", "attempt")
# A rollup row's two extremes, each as (value, seq, step, epoch, ts, attempt).
ROLLUP_EXTREMES = tuple(
    getattr(MetricRollup, f"{end}_{field}")
    for end in ("min", "max")
    for field in ("value", "seq", *EXTREME_FIELDS)
)


@dataclass(frozen=True)
class RollupPoint:
    seq: int
    name: str
    value: float
    step: int | None
    epoch: int | None
    ts: float
    attempt: int


class ChartPoint(NamedTuple):
    """A point of a downsampled chart, in the order of `POINT_COLUMNS` (as a point row)."""

    seq: int
    step: int | None
    epoch: int | None
    name: str
    value: float
    ts: float
    attempt: int


def add_to_rollups(session: Session, job_id: str, points: Sequence[RollupPoint]) -> None:
    """Fold `points` into the job's rollups (not committed): one upsert per touched bucket."""
    # Each touched bucket's lowest and highest point (the first of equals), as rows at the end.
    merged: dict[tuple[str, int, int], list[RollupPoint]] = {}
    for point in points:
        if point.value != point.value:  # NaN has no order: not a minimum nor a maximum
            continue
        for width in WIDTHS:
            key = (point.name, width, point.seq // width)
            ends = merged.get(key)
            if ends is None:
                merged[key] = [point, point]
                continue
            if point.value < ends[0].value:
                ends[0] = point
            if point.value > ends[1].value:
                ends[1] = point
    if merged:
        rows = [
            {"job_id": job_id, "name": name, "width": width, "bucket": bucket}
            | _extreme("min", low)
            | _extreme("max", high)
            for (name, width, bucket), (low, high) in merged.items()
        ]
        session.connection().execute(_upsert(session.get_bind().dialect.name), rows)


def _extreme(end: str, point: RollupPoint) -> dict[str, Any]:
    return {
        f"{end}_value": point.value,
        f"{end}_seq": point.seq,
        f"{end}_step": point.step,
        f"{end}_epoch": point.epoch,
        f"{end}_ts": point.ts,
        f"{end}_attempt": point.attempt,
    }


@functools.cache
def _upsert(dialect: str) -> Any:
    """INSERT … ON CONFLICT that keeps the smaller minimum and the larger maximum, each whole
    (every SET reads the row as it was, so one comparison holds for all of an extreme). Built
    once per dialect: building it took a fifth of a metric write."""
    # On the table, not the model: the ORM's bulk insert took most of the write's time.
    table = MetricRollup.__table__  # type: ignore[attr-defined]
    stmt: Any = (postgresql if dialect == "postgresql" else sqlite).insert(table)
    new = stmt.excluded
    replaces = {
        "min": new.min_value < table.c.min_value,
        "max": new.max_value > table.c.max_value,
    }
    set_ = {
        column: case((replaces[end], new[column]), else_=table.c[column])
        for end in replaces
        for column in (f"{end}_{field}" for field in ("value", "seq", *EXTREME_FIELDS))
    }
    return stmt.on_conflict_do_update(
        index_elements=["job_id", "width", "name", "bucket"], set_=set_
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
    session: Session,
    job_id: str,
    name: str,
    *,
    last_seq: int,
    max_points: int,
    after: int = 0,
) -> list[Row[Any]] | list[ChartPoint]:
    """At most `max_points` points of one metric with `after` < seq ≤ `last_seq`, in seq order:
    every point if there are that few, else each bucket's minimum and maximum (a zoomed chart
    asks for its range: buckets of that range, finer than the whole series'). Rows of
    `POINT_COLUMNS`, not ORM objects: a chart has thousands of points, and an ORM object
    costs tens of microseconds to make."""
    series = (
        MetricPoint.job_id == job_id,
        MetricPoint.name == name,
        col(MetricPoint.seq) > after,
        col(MetricPoint.seq) <= last_seq,
    )
    base = select(*POINT_COLUMNS).where(*series)
    # Whether the series fits, counted on its index without reading more than N + 1 rows.
    head = select(MetricPoint.seq).where(*series).limit(max_points + 1).subquery()
    if session.exec(select(func.count()).select_from(head)).one() <= max_points:
        return list(session.execute(base.order_by(col(MetricPoint.seq))).all())
    buckets = max(1, max_points // 2)
    first, last = (after + 1, last_seq)
    if last - first < SCAN_SPAN * max_points:
        # A range narrower than the finest rollups resolve (a deep zoom): its few points.
        return _downsample_scan(session, base, (first, last), buckets)
    # The finest width with at most twice the buckets wanted, merged below to `buckets`.
    width = next((w for w in WIDTHS if last // w - first // w + 1 <= 2 * buckets), WIDTHS[-1])
    stmt = select(*ROLLUP_EXTREMES).where(
        MetricRollup.job_id == job_id,
        MetricRollup.width == width,
        MetricRollup.name == name,
        col(MetricRollup.bucket) >= first // width,
        col(MetricRollup.bucket) <= last // width,
    )
    rows = session.execute(stmt.order_by(col(MetricRollup.bucket))).all()
    if not rows:  # points written before rollups were kept: bucket them here
        return _downsample_scan(session, base, (first, last), buckets)
    step = -(-len(rows) // buckets)
    chosen: dict[int, ChartPoint] = {}
    for start in range(0, len(rows), step):
        group = rows[start : start + step]
        # Extremes outside the range are left out: written after `last_seq` was read (the
        # stream brings them), or in an edge bucket's part before the range.
        lows = [e for e in (_point(r[:6], name) for r in group) if first <= e.seq <= last]
        highs = [e for e in (_point(r[6:], name) for r in group) if first <= e.seq <= last]
        if lows:
            low = min(lows, key=lambda p: (p.value, p.seq))
            chosen[low.seq] = low
        if highs:
            high = max(highs, key=lambda p: (p.value, p.seq))
            chosen[high.seq] = high
    return [chosen[seq] for seq in sorted(chosen)]


def _point(extreme: Sequence[Any], name: str) -> ChartPoint:
    """(value, seq, step, epoch, ts, attempt) of a rollup row's extreme, as a chart's point."""
    value, seq, step, epoch, ts, attempt = extreme
    return ChartPoint(seq, step, epoch, name, value, ts, attempt)


def _downsample_scan(
    session: Session, base: Any, seqs: tuple[int, int], buckets: int
) -> list[Row[Any]]:
    """The same answer read from every point (for points stored without rollups)."""
    first, last = seqs
    width = (last - first) // buckets + 1
    chosen: dict[int, tuple[Row[Any], Row[Any]]] = {}
    for point in session.execute(base.order_by(col(MetricPoint.seq))):
        bucket = (point.seq - first) // width
        low, high = chosen.get(bucket, (point, point))
        chosen[bucket] = (
            point if point.value < low.value else low,
            point if point.value > high.value else high,
        )
    kept = {p.seq: p for pair in chosen.values() for p in pair}
    return [kept[seq] for seq in sorted(kept)]


def delete_rollups(session: Session, job_ids: Sequence[str]) -> None:
    session.execute(delete(MetricRollup).where(col(MetricRollup.job_id).in_(job_ids)))


def metric_extremes(
    session: Session, job_ids: Sequence[str]
) -> dict[str, dict[str, tuple[float, float]]]:
    """Each job's metrics' (smallest, largest) value, by job id and name, in one query on the
    coarsest rollups (a row or two per job and name, whatever the jobs' lengths). NaN points have no
    order and are left out; points written before rollups were kept have none here."""
    if not job_ids:
        return {}
    low = func.min(MetricRollup.min_value)
    high = func.max(MetricRollup.max_value)
    stmt = (
        select(MetricRollup.job_id, MetricRollup.name, low, high)
        .where(col(MetricRollup.job_id).in_(job_ids), MetricRollup.width == WIDTHS[-1])
        .group_by(col(MetricRollup.job_id), col(MetricRollup.name))
    )
    found: dict[str, dict[str, tuple[float, float]]] = {}
    for job_id, name, smallest, largest in session.execute(stmt):
        found.setdefault(job_id, {})[name] = (smallest, largest)
    return found
