"""Retention of what finished jobs produced: their metric points and log lines are deleted
once the job finished longer ago than `metrics_retention_days` / `logs_retention_days`.

Run by the reaper on each pass (`service.reaper.reap_once`), a bounded number of jobs a pass,
so a first pass over a large history does not hold the database for long. The job row, its
state history, checkpoints and `latest_metrics` stay; `Job.metrics_pruned_at` and
`Job.logs_pruned_at` say when each was deleted (and keep the job from being visited again).
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.engine import Engine
from sqlmodel import col, select

from jobs.states import TERMINAL_STATES
from service.db import session_scope
from service.models import Job, LogLine, MetricPoint, MetricRollup, utcnow
from service.settings import Settings

log = logging.getLogger("launchbay.retention")
JOBS_PER_PASS = 20


@dataclass(frozen=True)
class Output:
    """One kind of output under retention: its tables and the job column that marks it gone."""

    tables: tuple[Any, ...]
    pruned_at: Any
    days: str


METRICS = Output((MetricPoint, MetricRollup), Job.metrics_pruned_at, "metrics_retention_days")
LOGS = Output((LogLine,), Job.logs_pruned_at, "logs_retention_days")


def prune_outputs(engine: Engine, settings: Settings, now: datetime) -> list[str]:
    """Delete the metrics and logs past their retention of up to JOBS_PER_PASS jobs each;
    the ids of the jobs pruned."""
    pruned: list[str] = []
    for output in (METRICS, LOGS):
        days: float | None = getattr(settings, output.days)
        if days is not None:
            pruned += prune_output(engine, output, now - timedelta(days=days))
    return pruned


def prune_output(engine: Engine, output: Output, finished_before: datetime) -> list[str]:
    with session_scope(engine) as session:
        stmt = (
            select(Job.id)
            .where(
                col(Job.state).in_(TERMINAL_STATES),
                col(Job.finished_at) < finished_before,
                col(output.pruned_at).is_(None),
            )
            .limit(JOBS_PER_PASS)
        )
        job_ids = list(session.exec(stmt).all())
        if not job_ids:
            return []
        for table in output.tables:
            session.execute(delete(table).where(col(table.job_id).in_(job_ids)))
        session.execute(
            update(Job).where(col(Job.id).in_(job_ids)).values({output.pruned_at.key: utcnow()})
        )
        session.commit()
    log.info("retention: deleted %s of %d job(s)", output.days.split("_")[0], len(job_ids))
    return job_ids
