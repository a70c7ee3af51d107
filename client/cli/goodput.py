"""`launchbay goodput`: where jobs' wall time and device time went (docs/goodput.md) — one
job's parts, or many jobs' summed up by owner, queue and period."""

from typing import Annotated

import typer

from client import render
from client.cli.base import app, out, print_json, state_of
from client.cli.jobs import JsonFlag
from client.goodput_models import Goodput, JobGoodput


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole > 0 else "-"


def job_rows(ledger: JobGoodput) -> list[dict[str, object]]:
    return [
        {
            "part": part.name,
            "seconds": f"{part.seconds:.1f}",
            "share": _percent(part.seconds, ledger.wall_s),
            "device_seconds": f"{part.device_seconds:.1f}",
            "detail": part.detail or "",
        }
        for part in ledger.parts
    ]


def summary_rows(summary: Goodput) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = [
        {
            "part": "training",
            "hours": "",
            "device_hours": f"{summary.trained_device_hours:.3f}",
            "share": _percent(summary.trained_device_hours, summary.device_hours),
        }
    ]
    rows += [
        {
            "part": part.name,
            "hours": f"{part.hours:.3f}",
            "device_hours": f"{part.device_hours:.3f}",
            "share": _percent(part.device_hours, summary.device_hours),
        }
        for part in summary.badput
    ]
    return rows


@app.command()
def goodput(
    ctx: typer.Context,
    job_id: Annotated[
        str | None, typer.Argument(help="One job (id, prefix or name): its parts.")
    ] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Whose jobs (admins).")] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Only this queue.")] = None,
    since: Annotated[
        str, typer.Option("--since", help="From when: ISO 8601, or a duration ago (7d, 12h).")
    ] = "7d",
    until: Annotated[str | None, typer.Option("--until", help="Until when (default: now).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show where device time went: training, and the badput by part (queued, environment,
    launch, first_step, checkpoint_stall, eval, hang, lost_work, retry_gap, teardown)."""
    with state_of(ctx).client() as lb:
        if job_id is not None:
            ledger = lb.get_job_goodput(job_id)
            if as_json:
                print_json(ledger)
                return
            columns = ["part", "seconds", "share", "device_seconds", "detail"]
            out().print(render.records_table(job_rows(ledger), columns))
            state = "final" if ledger.final else "so far"
            out().print(
                f"job {ledger.job_id}: {ledger.wall_s:.1f} s wall, {ledger.device_s:.1f} "
                f"device-s held, goodput {ledger.goodput:.1%} ({state})"
            )
            return
        summary = lb.get_goodput(owner=owner, queue=queue, since=since, until=until)
    if as_json:
        print_json(summary)
        return
    columns = ["part", "hours", "device_hours", "share"]
    out().print(render.records_table(summary_rows(summary), columns))
    if summary.lost_most:
        lost = [
            {
                "job_id": job.job_id,
                "name": job.name,
                "owner": job.owner,
                "badput_device_hours": f"{job.badput_device_hours:.3f}",
                "goodput": f"{job.goodput:.1%}",
            }
            for job in summary.lost_most
        ]
        worst = list(lost[0])
        out().print(render.records_table(lost, worst))
    who = summary.owner or "everyone"
    out().print(
        f"{who}: {summary.jobs} job(s) from {summary.since:%Y-%m-%d %H:%M} to "
        f"{summary.until:%Y-%m-%d %H:%M} UTC: {summary.device_hours:.3f} device-hours held, "
        f"{summary.trained_device_hours:.3f} trained, goodput {summary.goodput:.1%}"
    )
