"""Commands about the service rather than one job: code uploads, recipes, nodes, workers,
tokens."""

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from client import render, views
from client.cli.base import app, code_app, err, fail, out, print_json, state_of, token_app
from client.cli.jobs import JobId, JsonFlag
from client.models import CodeUpload


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


@code_app.command("list")
def code_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List your code uploads, newest first (code ids cut to 12 characters; --json: whole)."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_code())
    if as_json:
        print_json({"items": items})
    else:
        out().print(views.code_table(items))


@code_app.command("rm")
def code_rm(
    ctx: typer.Context,
    code_id: Annotated[
        str, typer.Argument(help="A code_id, or a unique prefix of one of yours (4+).")
    ],
) -> None:
    """Take back an upload of yours (refused while an unfinished job of yours runs it)."""
    with state_of(ctx).client() as lb:
        whole = _whole_code_id(lb.list_code(), code_id)
        lb.delete_code(whole)
    out().print(f"deleted code {whole}")


def _whole_code_id(uploads: list[CodeUpload], given: str) -> str:
    """`given`, or the one upload of yours whose code_id starts with it (4+ characters)."""
    if len(given) < 4 or any(u.code_id == given for u in uploads):
        return given
    found = [u.code_id for u in uploads if u.code_id.startswith(given.lower())]
    if len(found) > 1:
        fail(
            f"error ambiguous_id: {given!r} begins {len(found)} of your uploads: "
            + ", ".join(found)
        )
    return found[0] if found else given


@app.command()
def recipes(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="Only this recipe.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List the built-in training programs, each with its hyperparameters (name, type,
    default; their descriptions too at 100 columns or more). Set them in a spec's
    `config:`, or with `submit FILE --set config.NAME=VALUE`."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_recipes())
    if name is not None:
        items = [item for item in items if item.get("name") == name]
        if not items:
            fail(f"error not_found: no recipe {name!r}")
    if as_json:
        print_json({"items": items})
        return
    console = out()
    for index, item in enumerate(items):
        if index:
            console.print()
        console.print(views.recipe_view(item, console.width))


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
