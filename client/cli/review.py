"""Looking back at runs: compare (jobs side by side) and rerun (a job's spec again, changed)."""

from typing import Annotated

import typer

from client import render, views
from client.cli.base import app, err, fail, out, print_json, state_of
from client.cli.jobs import JsonFlag
from client.specfile import rerun_spec
from client.watch import describe_end, exit_code_for, follow_job

JobIds = Annotated[
    list[str],
    typer.Argument(
        help="Two jobs or more: ids, unique prefixes, names or name@N.", show_default=False
    ),
]


@app.command()
def compare(ctx: typer.Context, job_ids: JobIds, as_json: JsonFlag = False) -> None:
    """Show jobs side by side, as the dashboard's compare page: their states, the spec keys
    whose values differ, the latest value of each metric, and the step and metrics of the
    checkpoint the API marks best."""
    if len(job_ids) < 2:
        fail("error: compare needs two jobs or more", 2)
    with state_of(ctx).client() as lb:
        jobs = [lb.get_job(job_id) for job_id in job_ids]
        best = [next((c for c in lb.list_checkpoints(job.id) if c.best), None) for job in jobs]
    if as_json:
        print_json(
            {
                "items": [
                    {"job": render.plain(j), "best_checkpoint": render.plain(b)}
                    for j, b in zip(jobs, best, strict=True)
                ]
            }
        )
        return
    out().print(views.compare_view(render.plain(jobs), [render.plain(b) for b in best]))


@app.command()
def rerun(
    ctx: typer.Context,
    job_id: Annotated[
        str,
        typer.Argument(
            help="The job to run again: its id, a unique prefix, its name or name@N.",
            show_default=False,
        ),
    ],
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Change a field of its spec: --set nproc_per_node=2 --set config.lr=0.1 "
            "(dotted paths; values read as YAML; repeatable).",
        ),
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the new job to its end.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job's spec again, with changes; the API validates it as any submission. A
    secret variable (secret_env) must be given again with --set env.NAME=VALUE."""
    console = out()
    with state_of(ctx).client() as lb:
        before = lb.get_job(job_id)
        job = lb.submit_job(rerun_spec(before.spec, set_ or []))
        if not wait:
            if as_json:
                print_json(job)
            else:
                console.print(
                    f"submitted job {job.id} ({job.name}) again from {before.id}: ",
                    render.state_text(job.state),
                    sep="",
                )
            return
        err().print(f"submitted job {job.id} ({job.name}) again from {before.id}")
        job = follow_job(lb, job.id, console)
        console.print(describe_end(job))
    raise typer.Exit(exit_code_for(job))


@app.command()
def runs(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Only jobs whose name contains this (any case).")
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", help="Only jobs with this key=value tag.")
    ] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Only this owner's (admin).")] = None,
    field: Annotated[
        list[str] | None,
        typer.Option(
            "--field",
            "-f",
            help="A spec field as a column, dotted (config.lr); repeatable. "
            "Default: the fields whose values differ between the runs.",
        ),
    ] = None,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            "-m",
            help="A metric's last and best values as columns; repeatable. "
            "Default: up to 3, loss first.",
        ),
    ] = None,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort",
            help="The column to sort by (name, state, a field, last:NAME, best:NAME); "
            "-COLUMN for descending. Default: newest first.",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """One row per job (the newest that match), with spec fields and each metric's last and
    best value as columns (`GET /v1/runs`, one call). Not `launchbay run`, which runs a
    program."""
    with state_of(ctx).client() as lb:
        page = lb.list_runs(state, limit, name_contains=name, tag=tag, owner=owner)
    if as_json:
        print_json(page)
        return
    try:
        table = views.runs_view(render.plain(page.items), field or [], metric or [], sort)
    except ValueError as exc:
        fail(f"error: --sort: {exc}", 2)
    out().print(table)
