"""`GET /v1/goodput`: the ledgers of many jobs summed up (docs/goodput.md). An ended job counts
in the period its end falls in, from its stored ledger (`job_goodput`: one grouped query, and
one more for the jobs that lost most); a job not ended yet counts, with its ledger so far,
in a period that reaches the present."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, func, select

from jobs.contract.goodput import PARTS, TRAINING, WAITING, Ledger
from jobs.states import JobState
from service.models import Job, JobGoodput
from service.records.goodput import LEDGER_JOB_COLUMNS, LedgerJob, ledger_job, read_ledgers

_goodput = JobGoodput.__table__  # type: ignore[attr-defined]
_job = Job.__table__  # type: ignore[attr-defined]
ACTIVE_OR_QUEUED = tuple(str(s) for s in JobState if not s.is_terminal())


@dataclass
class Totals:
    """Seconds and device-seconds of each part, summed over some jobs."""

    jobs: int = 0
    wall_s: float = 0.0
    device_s: float = 0.0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))
    device_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PARTS, 0.0))

    def add(self, other: "Totals") -> None:
        self.jobs += other.jobs
        self.wall_s += other.wall_s
        self.device_s += other.device_s
        for part in PARTS:
            self.seconds[part] += other.seconds[part]
            self.device_seconds[part] += other.device_seconds[part]


@dataclass(frozen=True)
class JobLoss:
    """One job among those that lost most."""

    job_id: str
    name: str
    owner: str
    queue: str
    state: str
    device_s: float
    trained_device_s: float


@dataclass
class GoodputSummary:
    by_owner: dict[str, Totals]
    lost_most: list[JobLoss]

    def total(self) -> Totals:
        whole = Totals()
        for totals in self.by_owner.values():
            whole.add(totals)
        return whole


@dataclass(frozen=True)
class SummaryQuery:
    since: datetime
    until: datetime
    owner: str | None = None
    queue: str | None = None
    top: int = 10


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def _stored_filters(query: SummaryQuery) -> list[Any]:
    filters = [
        _goodput.c.ended_at >= _utc(query.since),
        _goodput.c.ended_at < _utc(query.until),
    ]
    if query.owner is not None:
        filters.append(_goodput.c.owner == query.owner)
    if query.queue is not None:
        filters.append(_goodput.c.queue == query.queue)
    return filters


def _stored_totals(connection: Connection, query: SummaryQuery) -> dict[str, Totals]:
    columns: list[Any] = [
        _goodput.c.owner,
        func.count(),
        func.sum(_goodput.c.wall_s),
        func.sum(_goodput.c.device_s),
    ]
    for part in PARTS:
        seconds = _goodput.c[f"{part}_s"]
        columns += [func.sum(seconds), func.sum(seconds * _goodput.c.devices)]
    stmt = select(*columns).where(*_stored_filters(query)).group_by(_goodput.c.owner)
    by_owner = {}
    for row in connection.execute(stmt):
        totals = Totals(int(row[1]), float(row[2] or 0), float(row[3] or 0))
        for i, part in enumerate(PARTS):
            totals.seconds[part] = float(row[4 + 2 * i] or 0)
            held = part not in WAITING
            totals.device_seconds[part] = float(row[5 + 2 * i] or 0) if held else 0.0
        by_owner[row[0]] = totals
    return by_owner


def _stored_losses(connection: Connection, query: SummaryQuery) -> list[JobLoss]:
    c = _goodput.c
    stmt = (
        select(c.job_id, c.name, c.owner, c.queue, c.state, c.device_s, c.training_s, c.devices)
        .where(*_stored_filters(query))
        .order_by(c.badput_device_s.desc(), c.job_id)
        .limit(query.top)
    )
    return [
        JobLoss(r.job_id, r.name, r.owner, r.queue, r.state, r.device_s, r.training_s * r.devices)
        for r in connection.execute(stmt)
    ]


def _live_jobs(connection: Connection, query: SummaryQuery) -> list[LedgerJob]:
    stmt = select(*LEDGER_JOB_COLUMNS).where(
        _job.c.state.in_(ACTIVE_OR_QUEUED), _job.c.created_at < _utc(query.until)
    )
    if query.owner is not None:
        stmt = stmt.where(_job.c.owner == query.owner)
    if query.queue is not None:
        stmt = stmt.where(_job.c.queue == query.queue)
    return [ledger_job(row) for row in connection.execute(stmt)]


def _totals_of(ledger: Ledger) -> Totals:
    totals = Totals(1, ledger.wall_s, ledger.device_s)
    for part in ledger.parts:
        totals.seconds[part.name] = part.seconds
        totals.device_seconds[part.name] = part.device_seconds
    return totals


def _add_live(
    summary: GoodputSummary, jobs: Sequence[LedgerJob], ledgers: dict[str, Ledger], top: int
) -> None:
    for job in jobs:
        ledger = ledgers[job.id]
        summary.by_owner.setdefault(job.owner, Totals()).add(_totals_of(ledger))
        trained = ledger.part(TRAINING).device_seconds
        loss = JobLoss(job.id, job.name, job.owner, job.queue, job.state, ledger.device_s, trained)
        summary.lost_most.append(loss)
    summary.lost_most.sort(key=lambda j: (-(j.device_s - j.trained_device_s), j.job_id))
    del summary.lost_most[top:]


def read_goodput_summary(
    connection: Connection, query: SummaryQuery, now: datetime
) -> GoodputSummary:
    """The jobs of `query` (see the module docstring), summed up by owner."""
    summary = GoodputSummary(_stored_totals(connection, query), _stored_losses(connection, query))
    if query.until >= now:
        live = _live_jobs(connection, query)
        _add_live(summary, live, read_ledgers(connection, live, now.timestamp()), query.top)
    return summary
