"""The `launchbay` command line.

Client commands talk to the API through `client.sdk.Client` (`--api-url`/`LAUNCHBAY_API_URL`,
`--token`/`LAUNCHBAY_TOKEN`). Server commands (`api`, `worker`, `reaper`, `db upgrade`) import the
service and the worker only when run, so the client commands never load them, nor torch.

Exit status: 0 ok; 1 the API refused (`error <code>: <message>`) or a followed job failed;
2 a followed job was cancelled (also click's status for a bad command line); 3 the API
cannot be reached; 130 interrupted.
"""

import csv
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from typer.core import TyperGroup

from client import render
from client.errors import (
    ApiError,
    ConnectionFailed,
    Forbidden,
    LaunchbayClientError,
    Unauthorized,
)
from client.sdk import Client
from client.specfile import SpecFileError, apply_assignments, load_spec
from client.sse import TERMINAL_STATES
from client.watch import describe_end, exit_code_for, follow_job

EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

# soft_wrap: lines (ids, messages) are never broken at the terminal width; tables still fit it.
console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class CliState:
    """What every command needs to reach the API; tests pass one with a fake transport."""

    api_url: str | None = None
    token: str | None = None
    transport: httpx.BaseTransport | None = None

    def client(self) -> Client:
        return Client(self.api_url, self.token, transport=self.transport)


class LaunchbayGroup(TyperGroup):
    """Turns the client's errors into one line and an exit status, never a traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except ConnectionFailed as exc:
            _fail(str(exc), EXIT_UNREACHABLE)
        except Unauthorized as exc:
            hint = "the token was refused" if _state(ctx).token else "the API needs a token"
            _fail(f"error {exc.code}: {exc.message} ({hint}: set LAUNCHBAY_TOKEN or pass --token)")
        except Forbidden as exc:
            _fail(f"error {exc.code}: {exc.message} (this needs a token with the admin role)")
        except ApiError as exc:
            _fail(f"error {exc.code}: {exc.message}")
        except (LaunchbayClientError, SpecFileError, OSError) as exc:
            _fail(f"error: {exc}")
        except KeyboardInterrupt:
            _fail("interrupted", EXIT_INTERRUPTED)


app = typer.Typer(
    cls=LaunchbayGroup,
    help="Launchbay: run PyTorch DDP training jobs through a REST service.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
code_app = typer.Typer(help="User code for jobs.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens (admin only).", no_args_is_help=True)
db_app = typer.Typer(help="The service's database.", no_args_is_help=True)
app.add_typer(code_app, name="code")
app.add_typer(token_app, name="token")
app.add_typer(db_app, name="db")


class MetricsFormat(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"


class Role(StrEnum):
    USER = "user"
    ADMIN = "admin"


JobId = Annotated[str, typer.Argument(help="The job's id.", show_default=False)]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON only.")]


@app.callback()
def _global_options(
    ctx: typer.Context,
    api_url: Annotated[
        str | None,
        typer.Option("--api-url", envvar="LAUNCHBAY_API_URL", help="The API's base URL."),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="LAUNCHBAY_TOKEN", help="Bearer token.", show_default=False),
    ] = None,
) -> None:
    state = ctx.ensure_object(CliState)
    state.api_url = api_url or state.api_url
    state.token = token or state.token


# Jobs


@app.command()
def submit(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON (`-`: standard input).")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a field: --set config.lr=0.01 (repeatable)."),
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Submit at most once per key.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the job to its end.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job. With --wait, exit like `watch`: 0 succeeded, 1 failed, 2 cancelled."""
    spec = apply_assignments(load_spec(file), set_ or [])
    with _state(ctx).client() as lb:
        job = lb.submit(spec, idempotency_key=idempotency_key)
        if not wait:
            if as_json:
                _print_json(job)
            else:
                state_text = render.state_text(job.get("state"))
                console.print(
                    f"submitted job {job['id']} ({job.get('name')}): ", state_text, sep=""
                )
            return
        if as_json:
            job = lb.wait(job["id"])
            _print_json(job)
        else:
            err_console.print(f"submitted job {job['id']} ({job.get('name')})")
            job = follow_job(lb, job["id"], console)
            console.print(describe_end(job))
    raise typer.Exit(exit_code_for(job))


@app.command("list")
def list_jobs(
    ctx: typer.Context,
    state: Annotated[str | None, typer.Option("--state", help="Only jobs in this state.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List jobs, newest first."""
    with _state(ctx).client() as lb:
        page = lb.list(state=state, limit=limit)
    if as_json:
        _print_json(page)
    else:
        console.print(render.jobs_table(page.get("items", []), page.get("total")))


@app.command()
def status(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """Show one job."""
    with _state(ctx).client() as lb:
        job = lb.get(job_id)
    if as_json:
        _print_json(job)
    else:
        console.print(render.job_table(job))


@app.command()
def watch(ctx: typer.Context, job_id: JobId) -> None:
    """Follow a job live. Exit status: 0 succeeded, 1 failed, 2 cancelled, 3 API unreachable."""
    with _state(ctx).client() as lb:
        try:
            job = follow_job(lb, job_id, console)
        except KeyboardInterrupt:
            _fail(f"stopped watching; job {job_id} goes on", EXIT_INTERRUPTED)
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
) -> None:
    """Print a job's log lines (every rank's, prefixed [rank R] or, for a multi-node job,
    [node N/rank R], unless --rank)."""
    after = 0
    with _state(ctx).client() as lb:
        job = lb.get(job_id)
        multi_node = int(job["spec"].get("nnodes") or 1) > 1
        while True:
            ended = not follow or job["state"] in TERMINAL_STATES
            for item in lb.iter_logs(job_id, rank=rank, after=after, node=node):
                after = item["seq"]
                line = (
                    render.to_json_line(item)
                    if as_json
                    else render.format_log(item, rank is None, multi_node and rank is None)
                )
                typer.echo(line)
            if ended:
                return
            time.sleep(poll_s)
            job = lb.get(job_id)


@app.command()
def metrics(
    ctx: typer.Context,
    job_id: JobId,
    name: Annotated[str | None, typer.Option("--name", help="Only this metric.")] = None,
    fmt: Annotated[MetricsFormat, typer.Option("--format")] = MetricsFormat.TABLE,
) -> None:
    """Print a job's metric points: a table (one row per step), CSV or JSON."""
    with _state(ctx).client() as lb:
        points = list(lb.iter_metrics(job_id, name=name))
    if fmt is MetricsFormat.JSON:
        _print_json(points)
    elif fmt is MetricsFormat.CSV:
        fields = ["seq", "step", "epoch", "name", "value", "ts"]
        writer = csv.DictWriter(sys.stdout, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(points)
    else:
        console.print(render.metrics_table(points))


@app.command()
def cancel(ctx: typer.Context, job_id: JobId) -> None:
    """Cancel a job (a queued one at once, a running one once its processes are gone)."""
    with _state(ctx).client() as lb:
        job = lb.cancel(job_id)
    console.print(f"job {job['id']}: ", render.state_text(job.get("state")), sep="")


@app.command()
def delete(ctx: typer.Context, job_id: JobId) -> None:
    """Delete a finished job and its files."""
    with _state(ctx).client() as lb:
        lb.delete(job_id)
    console.print(f"deleted job {job_id}")


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
) -> None:
    """Download a checkpoint, resuming an interrupted transfer and checking its sha256."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with _state(ctx).client() as lb, Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(f"{job_id} {checkpoint}", total=None)
        path = lb.download(
            job_id,
            checkpoint,
            output,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    console.print(f"saved {path} (sha256 verified)")


# Code, recipes, workers


@code_app.command("upload")
def code_upload(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".py, .zip, .tar.gz")],
    as_json: JsonFlag = False,
) -> None:
    """Upload user code; use the printed code_id in a spec's `code:`."""
    with _state(ctx).client() as lb:
        uploaded = lb.upload_code(path)
    if as_json:
        _print_json(uploaded)
    else:
        console.print(
            f"code_id {uploaded['code_id']}  sha256 {uploaded.get('sha256')}  "
            f"size {uploaded.get('size')}"
        )


@app.command()
def recipes(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the built-in training programs."""
    with _state(ctx).client() as lb:
        body = lb.recipes()
    if as_json:
        _print_json(body)
    else:
        console.print(render.records_table(render.items_of(body), ["name", "description"]))


@app.command()
def nodes(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """List the nodes of a multi-node job: per attempt, the worker and host of each node, the
    rendezvous endpoint, and how each ended."""
    with _state(ctx).client() as lb:
        body = lb.nodes(job_id)
    if as_json:
        _print_json(body)
        return
    columns = ["attempt", "node", "worker", "host", "endpoint", "state", "exit_reason"]
    console.print(render.records_table(render.items_of(body), columns))


@app.command()
def workers(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the workers seen, their queues, devices, heartbeat and current job."""
    with _state(ctx).client() as lb:
        body = lb.workers()
    if as_json:
        _print_json(body)
    else:
        console.print(render.records_table(render.items_of(body)))


# Tokens


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("--name", help="A name to list and revoke it by.")],
    role: Annotated[Role, typer.Option("--role")] = Role.USER,
    expires_at: Annotated[
        str | None, typer.Option("--expires-at", help="ISO 8601 time it stops working.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Create a token; its secret is printed this once."""
    with _state(ctx).client() as lb:
        created = lb.create_token(name, role=role.value, expires_at=expires_at)
    if as_json:
        _print_json(created)
    else:
        err_console.print(f"token {created['name']} ({created['role']}), shown only this once:")
        typer.echo(created["token"])


@token_app.command("list")
def token_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List tokens (never their secrets)."""
    with _state(ctx).client() as lb:
        body = lb.list_tokens()
    if as_json:
        _print_json(body)
    else:
        console.print(render.records_table(render.items_of(body)))


@token_app.command("revoke")
def token_revoke(ctx: typer.Context, name: Annotated[str, typer.Argument()]) -> None:
    """Revoke a token by name."""
    with _state(ctx).client() as lb:
        lb.revoke_token(name)
    console.print(f"revoked token {name}")


# Server side: imported only when run.


@app.command()
def api(
    host: Annotated[str, typer.Option("--host")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            help="Processes serving the port (default 1); more use more CPU cores.",
        ),
    ] = 1,
) -> None:
    """Run the HTTP service (applies database migrations first)."""
    from service.app import run_api

    run_api(host, port, workers)


@app.command()
def worker(
    queue: Annotated[
        list[str] | None, typer.Option("--queue", "-q", help="Queue to serve (repeatable).")
    ] = None,
    burst: Annotated[bool, typer.Option("--burst", help="Exit once the queues are empty.")] = False,
    gpus: Annotated[
        str | None,
        typer.Option(
            "--gpus",
            help="CUDA ids this worker owns, e.g. 0,1 (as CUDA_VISIBLE_DEVICES takes them); "
            "default: every visible CUDA device.",
        ),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option(
            "--slots",
            min=1,
            help="CPU slots of a worker without GPUs (default: the cores it may use).",
        ),
    ] = None,
) -> None:
    """Run a worker on the given queues (default: `default`).

    Its jobs may have as many ranks as it has GPUs, or CPU slots without any; GPUs are not
    shared with the other workers of its host (docs/deployment.md, "Placement and queues").
    """
    from worker.devices import DevicesTaken, parse_gpu_ids

    gpu_ids = None
    if gpus is not None:
        try:
            gpu_ids = parse_gpu_ids(gpus)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpus") from None
        if slots is not None:
            raise typer.BadParameter("give --gpus or --slots, not both", param_hint="--slots")
    from worker.main import run_worker

    try:
        run_worker(queues=queue or ["default"], burst=burst, gpus=gpu_ids, cpu_slots=slots)
    except DevicesTaken as exc:
        err_console.print(f"error: {exc}")
        raise typer.Exit(1) from None


@app.command()
def reaper(
    interval: Annotated[
        float | None,
        typer.Option(
            "--interval", min=0.1, help="Seconds between passes (LAUNCHBAY_REAPER_INTERVAL_S)."
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Make one pass and exit.")] = False,
) -> None:
    """Fail or retry jobs whose worker was lost; enqueue again queued jobs Redis lost."""
    from service.reaper import run_reaper

    run_reaper(interval_s=interval, once=once)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply the migrations to LAUNCHBAY_DATABASE_URL."""
    from service.db import upgrade_database
    from service.settings import get_settings

    upgrade_database(get_settings().resolved_database_url)


def main() -> None:
    app()


def _state(ctx: typer.Context) -> CliState:
    return ctx.find_root().ensure_object(CliState)


def _print_json(value: Any) -> None:
    typer.echo(render.to_json(value))


def _fail(message: str, code: int = 1) -> NoReturn:
    err_console.print(message, style="red", markup=False)
    raise typer.Exit(code)
