"""The job commands: submit, list, status, watch, logs, metrics, checkpoints, cancel, delete,
download."""

import csv
import json
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from client import render, views
from client.cli.base import EXIT_INTERRUPTED, app, err, fail, out, print_json, state_of
from client.specfile import apply_assignments, load_spec
from client.watch import SYSTEM_PREFIX, describe_end, exit_code_for, follow_job


class MetricsFormat(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"


JobId = Annotated[
    str,
    typer.Argument(
        help="The job: its id, a unique prefix of it (4+ characters), its name, or name@N "
        "(the Nth newest job of that name).",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON only.")]


@app.command()
def submit(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON ('-': standard input).")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a field: --set config.lr=0.01 (repeatable)."),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Submit at most once per key.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the job to its end.")] = False,
    as_json: JsonFlag = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print what would be launched (the sbatch script for a Slurm queue); "
            "submit nothing.",
        ),
    ] = False,
) -> None:
    """Submit a job. With --wait, exit like 'watch': 0 succeeded, 1 failed, 2 cancelled."""
    spec = apply_assignments(load_spec(file), set_ or [])
    console = out()
    with state_of(ctx).client() as lb:
        if dry_run:
            print_dry_run(lb.dry_run_job(spec), as_json)
            return
        job = lb.submit_job(spec, idempotency_key=idempotency_key)
        say_warnings(job.warnings)
        if not wait:
            if as_json:
                print_json(job)
            else:
                console.print(
                    f"submitted job {job.id} ({job.name}): ", render.state_text(job.state), sep=""
                )
            return
        if as_json:
            job = lb.wait_for_job(job.id)
            print_json(job)
        else:
            err().print(f"submitted job {job.id} ({job.name})")
            job = follow_job(lb, job.id, console)
            console.print(describe_end(job))
    raise typer.Exit(exit_code_for(job))


def say_warnings(warnings: list[str]) -> None:
    """What the API said of a job it accepted (e.g. workers of its queue that cannot run it),
    on stderr, so that --json's stdout stays JSON."""
    for warning in warnings:
        err().print(f"warning: {warning}", markup=False, highlight=False)


def print_dry_run(plan: dict[str, Any], as_json: bool) -> None:
    """The sbatch script as it is (for a Slurm queue), else the tasks; JSON with --json."""
    if as_json:
        print(json.dumps(plan, indent=2))
        return
    script = plan.get("sbatch_script")
    if script:
        sys.stdout.write(script)
        return
    print(f"executor: {plan.get('executor')}  queue: {plan.get('queue')}")
    for task in plan.get("tasks", []):
        node = "" if task.get("node") is None else f"  node {task['node']}"
        print(f"task {task.get('task_id')}{node}")


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Only jobs whose name contains this text (any case)."),
    ] = None,
    tag: Annotated[
        str | None, typer.Option("--tag", help="Only jobs with this tag: KEY=VALUE.")
    ] = None,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Only this owner's jobs (admin).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List jobs, newest first; under a failed job, its exit reason and message."""
    with state_of(ctx).client() as lb:
        page = lb.list_jobs(state=state, limit=limit, name_contains=name, tag=tag, owner=owner)
    if as_json:
        print_json(page)
    else:
        console = out()
        total = f"{page.total}+" if page.total_is_estimate else page.total
        console.print(views.jobs_view(render.plain(page.items), total, console))


@app.command()
def status(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """Show one job, with a summary of its checkpoints."""
    with state_of(ctx).client() as lb:
        job = lb.get_job(job_id)
        checkpoints = lb.list_checkpoints(job.id)
    if as_json:
        print_json(job)
    else:
        out().print(render.job_table(render.plain(job), render.plain(checkpoints)))


@app.command()
def watch(ctx: typer.Context, job_id: JobId) -> None:
    """Follow a job live. Exit status: 0 succeeded, 1 failed, 2 cancelled, 3 API unreachable."""
    console = out()
    with state_of(ctx).client() as lb:
        try:
            job = follow_job(lb, job_id, console)
        except KeyboardInterrupt:
            fail(f"stopped watching; job {job_id} goes on", EXIT_INTERRUPTED)
    console.print(describe_end(job))
    raise typer.Exit(exit_code_for(job))


@app.command()
def logs(
    ctx: typer.Context,
    job_id: JobId,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new lines.")
    ] = False,
    rank: Annotated[int | None, typer.Option("--rank", help="Only this rank's lines.")] = None,
    node: Annotated[
        int | None, typer.Option("--node", help="Only this node's lines (multi-node jobs).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    poll_s: Annotated[float, typer.Option("--poll", hidden=True)] = 1.0,
    grep: Annotated[
        str | None,
        typer.Option("--grep", help="Only lines that contain this text (searched by the API)."),
    ] = None,
    regex: Annotated[bool, typer.Option("--regex", help="--grep is a regular expression.")] = False,
) -> None:
    """Print a job's log lines: every rank's, prefixed [rank R] (or [node N/rank R] for a
    multi-node job), or one rank's as written with --rank; with --grep, only the matching
    ones."""
    if grep is not None:
        grep_logs(ctx, job_id, grep, regex, rank, as_json)
        return
    after = 0
    with state_of(ctx).client() as lb:
        job = lb.get_job(job_id)
        job_id = job.id  # a prefix or a name resolved once
        multi_node = int(job.spec.get("nnodes") or 1) > 1
        while True:
            ended = not follow or job.is_terminal()
            for item in lb.iter_logs(job_id, rank=rank, after=after, node=node):
                after = item.seq
                record = item.model_dump(mode="json")
                line = (
                    render.to_json_line(record)
                    if as_json
                    else render.format_log(record, rank is None, multi_node and rank is None)
                )
                typer.echo(line)
            if ended:
                return
            time.sleep(poll_s)
            job = lb.get_job(job_id)


def grep_logs(
    ctx: typer.Context, job_id: str, text: str, regex: bool, rank: int | None, as_json: bool
) -> None:
    """`logs --grep`: every matching line, page after page (searched by the API)."""
    after = 0
    with state_of(ctx).client() as lb:
        while True:
            page = lb.search_job_logs(job_id, text, regex=regex, rank=rank, after=after)
            for item in page.items:
                record = item.model_dump(mode="json")
                typer.echo(
                    render.to_json_line(record) if as_json else render.format_log(record, True)
                )
            if not page.items or page.next_after == after:
                return
            after = page.next_after


@app.command()
def metrics(
    ctx: typer.Context,
    job_id: JobId,
    name: Annotated[str | None, typer.Option("--name", help="Only this metric.")] = None,
    fmt: Annotated[MetricsFormat, typer.Option("--format")] = MetricsFormat.TABLE,
    as_json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
) -> None:
    """Print a job's metric points: a table (one row per step), CSV or JSON."""
    with state_of(ctx).client() as lb:
        points = render.plain(list(lb.iter_metrics(job_id, name=name)))
    if as_json or fmt is MetricsFormat.JSON:
        print_json(points)
    elif fmt is MetricsFormat.CSV:
        fields = ["seq", "step", "epoch", "name", "value", "ts", "attempt"]
        writer = csv.DictWriter(sys.stdout, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(points)
    else:
        # Launchbay's own system metrics (GPU readings, no step) are charts, not table rows.
        shown = [p for p in points if name or not str(p["name"]).startswith(SYSTEM_PREFIX)]
        out().print(render.metrics_table(shown))
        if len(shown) < len(points):
            left = len(points) - len(shown)
            err().print(f"({left} system metric points not shown: --name NAME or --format csv)")


@app.command()
def checkpoints(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """List a job's checkpoints, oldest first; the best (by the spec's best_metric) and the
    latest are marked, as the API marks them. Download one with 'download ID --checkpoint
    CKPT_ID'."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_checkpoints(job_id))
    if as_json:
        print_json([{**item, "marks": render.checkpoint_marks(item)} for item in items])
    else:
        console = out()
        console.print(render.checkpoints_view(items, console))


@app.command()
def cancel(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """Cancel a job (a queued one at once, a running one once its processes are gone)."""
    with state_of(ctx).client() as lb:
        job = lb.cancel_job(job_id)
    if as_json:
        print_json(job)
    else:
        out().print(f"job {job.id}: ", render.state_text(job.state), sep="")


@app.command()
def delete(ctx: typer.Context, job_id: JobId) -> None:
    """Delete a finished job and its files."""
    with state_of(ctx).client() as lb:
        lb.delete_job(job_id)
    out().print(f"deleted job {job_id}")


@app.command()
def download(
    ctx: typer.Context,
    job_id: JobId,
    checkpoint: Annotated[
        str, typer.Option("--checkpoint", help="latest, best, or a checkpoint id.")
    ] = "latest",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File or directory to save to.")
    ] = None,
    no_clobber: Annotated[
        bool,
        typer.Option(
            "--no-clobber",
            help="When the -o file exists, save beside it as NAME-2.pt (NAME-3.pt, ...).",
        ),
    ] = False,
) -> None:
    """Download a checkpoint, resuming an interrupted transfer and checking its sha256; a
    directory checkpoint is unpacked (into -o without its .tar/.pt suffix) and every file
    checked against its manifest. The last line says where it went."""
    if no_clobber and output is not None:
        output = unused_path(output)
    columns = (
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    progress = Progress(*columns, console=err(), transient=True)
    with state_of(ctx).client() as lb, progress as bar:
        task = bar.add_task(f"{job_id} {checkpoint}", total=None)
        path = lb.download_checkpoint(
            job_id,
            checkpoint,
            output,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    if path.is_dir():
        out().print(f"unpacked {path}/ (sha256 of the tar and of every file verified)")
    else:
        out().print(f"saved {path} (sha256 verified)")


def unused_path(path: Path) -> Path:
    """`path` when nothing is there (or it is a directory, which the file goes into), else the
    first of `<stem>-2<suffix>`, `<stem>-3<suffix>`, ... that is free."""
    if not path.exists() or path.is_dir():
        return path
    number = 2
    while (candidate := path.with_name(f"{path.stem}-{number}{path.suffix}")).exists():
        number += 1
    return candidate
