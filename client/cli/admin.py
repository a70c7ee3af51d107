"""Commands about the service rather than one job: code uploads, recipes, nodes, workers,
tokens."""

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from client import render
from client.cli.base import app, code_app, err, out, print_json, state_of, token_app
from client.cli.jobs import JobId, JsonFlag


class Role(StrEnum):
    USER = "user"
    ADMIN = "admin"


@code_app.command("upload")
def code_upload(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help=".py, .zip, .tar.gz")],
    as_json: JsonFlag = False,
) -> None:
    """Upload user code; use the printed code_id in a spec's 'code:'."""
    with state_of(ctx).client() as lb:
        uploaded = lb.upload_code(path)
    if as_json:
        print_json(uploaded)
    else:
        out().print(f"code_id {uploaded.code_id}  sha256 {uploaded.sha256}  size {uploaded.size}")


@app.command()
def recipes(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the built-in training programs."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_recipes())
    if as_json:
        print_json({"items": items})
    else:
        out().print(render.records_table(items, ["name", "description"]))


@app.command()
def nodes(ctx: typer.Context, job_id: JobId, as_json: JsonFlag = False) -> None:
    """List the nodes of a multi-node job: per attempt, the worker and host of each node,
    the rendezvous endpoint, and how each ended."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_nodes(job_id))
    if as_json:
        print_json({"items": items})
        return
    columns = ["attempt", "node", "worker", "host", "endpoint", "state", "exit_reason"]
    out().print(render.records_table(items, columns))


@app.command()
def workers(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the workers seen: their queues, devices, state, last heartbeat and current job."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_workers())
    if as_json:
        print_json({"items": items})
    else:
        out().print(render.workers_table(items))


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
    with state_of(ctx).client() as lb:
        created = lb.create_token(name, role=role.value, expires_at=expires_at)
    if as_json:
        print_json(created)
    else:
        err().print(f"token {created.name} ({created.role}), shown only this once:")
        typer.echo(created.token)


@token_app.command("list")
def token_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List tokens (never their secrets)."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_tokens())
    if as_json:
        print_json({"items": items})
    else:
        columns = ["name", "role", "active", "created_at", "expires_at"]
        out().print(render.records_table(items, columns))


@token_app.command("revoke")
def token_revoke(ctx: typer.Context, name: Annotated[str, typer.Argument()]) -> None:
    """Revoke a token by name."""
    with state_of(ctx).client() as lb:
        lb.revoke_token(name)
    out().print(f"revoked token {name}")


@app.command()
def queue(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the jobs waiting to run, in the order they will run, with why each waits."""
    with state_of(ctx).client() as lb:
        waiting = lb.get_queue()
    if as_json:
        print_json(waiting)
        return
    out().print(render.queue_table(render.plain(waiting.items), waiting.total))


@app.command()
def usage(
    ctx: typer.Context,
    owner: Annotated[str | None, typer.Option("--owner", help="Only this owner (admins).")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From when, ISO 8601 (default: one quota period ago)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Show the device-seconds each owner's jobs held."""
    with state_of(ctx).client() as lb:
        used = lb.get_usage(owner=owner, since=since)
    if as_json:
        print_json(used)
        return
    rows = render.plain(used.items)
    for row in rows:
        row["device_hours"] = f"{row['device_seconds'] / 3600:.3f}"
    caption = f"since {used.since.isoformat()}"
    out().print(render.records_table(rows, ["owner", "device_seconds", "device_hours", "jobs"]))
    out().print(caption)
