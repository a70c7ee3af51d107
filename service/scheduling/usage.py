"""Device-seconds per owner, from the reservations (held from admission to release): decayed
with a half-life for fair share, summed over a period for quotas and GET /v1/usage."""

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, and_, or_, select

from service.models import JobReservation
from service.scheduling.planner import OwnerUsage

# Usage older than this many half-lives weighs under 1/64: not read.
DECAY_HORIZON = 6


@dataclass(frozen=True)
class HeldSpan:
    owner: str
    job_id: str
    devices: int
    start: float
    end: float | None


def held_spans(connection: Connection, since: datetime, owner: str | None = None) -> list[HeldSpan]:
    """The reservations held at any time since `since` (Unix-second spans)."""
    table = JobReservation.__table__  # type: ignore[attr-defined]
    stmt = select(
        table.c.owner, table.c.job_id, table.c.devices, table.c.admitted_at, table.c.released_at
    ).where(or_(table.c.released_at.is_(None), table.c.released_at > since))
    if owner is not None:
        stmt = stmt.where(and_(table.c.owner == owner))
    return [
        HeldSpan(
            r.owner,
            r.job_id,
            len(r.devices or ()),
            r.admitted_at.timestamp(),
            None if r.released_at is None else r.released_at.timestamp(),
        )
        for r in connection.execute(stmt)
    ]


def decayed_seconds(span: HeldSpan, now: float, half_life_s: float) -> float:
    """∫ devices · 2^-(now - t)/h dt over the span."""
    end = now if span.end is None else min(span.end, now)
    start = min(span.start, end)
    rate = math.log(2) / half_life_s
    return span.devices * (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start))) / rate


def period_seconds(span: HeldSpan, since: float, until: float) -> float:
    end = until if span.end is None else min(span.end, until)
    return span.devices * max(0.0, end - max(span.start, since))


def owner_usage(
    spans: Iterable[HeldSpan], *, now: float, half_life_s: float, period_s: float
) -> dict[str, OwnerUsage]:
    """Each owner's held devices, decayed usage and usage in the quota period."""
    usage: dict[str, OwnerUsage] = {}
    spans = list(spans)
    add_spans(usage, spans, now=now, half_life_s=half_life_s, period_s=period_s)
    for span in spans:
        if span.end is None:
            usage[span.owner].held_devices += span.devices
    return usage


def add_spans(
    usage: dict[str, OwnerUsage],
    spans: Iterable[HeldSpan],
    *,
    now: float,
    half_life_s: float,
    period_s: float,
) -> None:
    """Add to each owner's decayed usage and usage in the quota period what `spans` held."""
    for span in spans:
        owner = usage.setdefault(span.owner, OwnerUsage())
        owner.decayed_s += decayed_seconds(span, now, half_life_s)
        owner.period_s += period_seconds(span, now - period_s, now)


def usage_since(
    connection: Connection, now: datetime, half_life_s: float, period_s: float
) -> dict[str, OwnerUsage]:
    """`owner_usage` from the database: reservations of the last few half-lives (at least the
    quota period)."""
    horizon = max(period_s, DECAY_HORIZON * half_life_s)
    since = datetime.fromtimestamp(now.timestamp() - horizon, tz=now.tzinfo)
    spans = held_spans(connection, since)
    return owner_usage(spans, now=now.timestamp(), half_life_s=half_life_s, period_s=period_s)


@dataclass(frozen=True)
class OwnerPeriodUsage:
    owner: str
    device_seconds: float
    jobs: int


def usage_per_owner(
    connection: Connection, since: datetime, until: datetime, owner: str | None = None
) -> list[OwnerPeriodUsage]:
    """GET /v1/usage: device-seconds each owner held between `since` and `until`."""
    totals: dict[str, float] = {}
    jobs: dict[str, set[str]] = {}
    start, end = since.timestamp(), until.timestamp()
    for span in held_spans(connection, since, owner):
        if span.start >= end:
            continue
        totals[span.owner] = totals.get(span.owner, 0.0) + period_seconds(span, start, end)
        jobs.setdefault(span.owner, set()).add(span.job_id)
    return [
        OwnerPeriodUsage(name, round(seconds, 3), len(jobs[name]))
        for name, seconds in sorted(totals.items(), key=lambda item: (-item[1], item[0]))
    ]
