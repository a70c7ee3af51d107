"""Runs: the jobs of the jobs list, each with a summary of its metrics (last, smallest,
largest, best), for a table of many runs in one call (the dashboard's runs page,
`launchbay runs`)."""

import math
from typing import Annotated, Literal

from fastapi import APIRouter, Query

from service import records
from service.deps import SessionDep, SettingsDep
from service.models import Job
from service.routes.job_filters import JobFiltersDep
from service.schemas import JobPublic, MetricSummary, RunPublic, RunsPublic

router = APIRouter(prefix="/v1/runs", tags=["runs"])


@router.get("", response_model=RunsPublic)
def list_runs(
    session: SessionDep,
    settings: SettingsDep,
    filters: JobFiltersDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
) -> RunsPublic:
    """The jobs `GET /v1/jobs` lists with the same filters, newest first, each with its
    metrics summed up: two queries per page (the jobs, then every metric's extremes of all of
    them from the coarsest rollups), however many jobs and points."""
    rows, total, estimated = filters.page(session, settings, limit, offset)
    extremes = records.metric_extremes(session, [job.id for job in rows])
    return RunsPublic(
        items=[
            RunPublic(
                job=JobPublic.model_validate(job), metrics=summarize(job, extremes.get(job.id, {}))
            )
            for job in rows
        ],
        total=total,
        total_is_estimate=estimated,
    )


def summarize(job: Job, extremes: dict[str, tuple[float, float]]) -> dict[str, MetricSummary]:
    """Each metric's summary: the last value from the job's row, the extremes from rollups."""
    latest = job.latest_metrics or {}
    summaries = {}
    for name in sorted({*latest, *extremes}):
        low, high = extremes.get(name, (None, None))
        mode = best_mode_of(job, name)
        summaries[name] = MetricSummary(
            last=_finite(latest.get(name)),
            min=low,
            max=high,
            best=low if mode == "min" else high,
            best_mode=mode,
        )
    return summaries


def best_mode_of(job: Job, name: str) -> Literal["min", "max"]:
    """Which extreme is a metric's best: the job's checkpoint policy says so for its
    `best_metric`; a loss or an error is best lowest; anything else (accuracy...) highest."""
    policy = (job.spec or {}).get("checkpoint") or {}
    if name == policy.get("best_metric"):
        return "max" if policy.get("best_mode") == "max" else "min"
    lowered = name.lower()
    return "min" if "loss" in lowered or "error" in lowered else "max"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
