"""Operating jobs day to day: webhooks, ranks' stacks, the audit log, log search across jobs."""

import time
from enum import StrEnum
from typing import Annotated

import typer

from client import render
from client.cli.base import app, err, fail, out, print_json, state_of, sub_app
from client.cli.jobs import JobId, JsonFlag
from client.models import Stacks

webhook_app = sub_app("Webhooks: endpoints told of jobs' events, signed (docs/webhooks.md).")
app.add_typer(webhook_app, name="webhook")


class EventKind(StrEnum):
    STATE = "state"
    TERMINAL = "terminal"
    CHECKPOINT = "checkpoint"
    BEST = "best"


class PayloadFormat(StrEnum):
    JSON = "json"
    SLACK = "slack"


@webhook_app.command("add")
def webhook_add(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="Where to POST (http:// or https://).")],
    events: Annotated[
        list[EventKind] | None,
        typer.Option("--event", "-e", help="An event kind to send (repeat); default: terminal."),
    ] = None,
    payload: Annotated[
        PayloadFormat, typer.Option("--format", help='json, or slack ({"text": ...}).')
    ] = PayloadFormat.JSON,
    all_jobs: Annotated[
        bool, typer.Option("--all-jobs", help="Every owner's jobs (admin only).")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Register a webhook; its signing secret is printed this once."""
    kinds = [e.value for e in events] if events else [EventKind.TERMINAL.value]
    with state_of(ctx).client() as lb:
        created = lb.create_webhook(url, kinds, format=payload.value, all_jobs=all_jobs)
    if as_json:
        print_json(created)
        return
    err().print(f"webhook {created.id} for {', '.join(created.events)}; secret, shown only once:")
    typer.echo(created.secret)


@webhook_app.command("list")
def webhook_list(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List your webhooks (an admin: everyone's)."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_webhooks())
    if as_json:
        print_json({"items": items})
    else:
        out().print(render.records_table(items, ["id", "url", "events", "format", "all_jobs"]))


@webhook_app.command("rm")
def webhook_rm(ctx: typer.Context, webhook_id: Annotated[str, typer.Argument()]) -> None:
    """Remove a webhook (and its deliveries)."""
    with state_of(ctx).client() as lb:
        lb.delete_webhook(webhook_id)
    out().print(f"removed webhook {webhook_id}")


@webhook_app.command("deliveries")
def webhook_deliveries(
    ctx: typer.Context,
    webhook_id: Annotated[str, typer.Argument()],
    job_id: Annotated[str | None, typer.Option("--job", help="Only this job's.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """A webhook's deliveries, newest first: status, attempts, the last answer."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_deliveries(webhook_id, job_id=job_id))
    if as_json:
        print_json({"items": items})
        return
    columns = ["id", "job_id", "type", "status", "attempts", "last_status_code", "last_error"]
    out().print(render.records_table(items, columns))


@webhook_app.command("redeliver")
def webhook_redeliver(
    ctx: typer.Context,
    webhook_id: Annotated[str, typer.Argument()],
    delivery_id: Annotated[str, typer.Argument()],
) -> None:
    """Send a delivery again (same id and body)."""
    with state_of(ctx).client() as lb:
        lb.redeliver(webhook_id, delivery_id)
    out().print(f"delivery {delivery_id} will be sent again")


def format_stacks(stacks: Stacks) -> str:
    """The latest capture: a summary line, then each rank's stack under a header."""
    if not stacks.items:
        return "no stacks recorded"
    latest = stacks.items[0].ts
    lines = []
    if stacks.summary is not None:
        lines.append(f"# {stacks.summary.reason}: {stacks.summary.note}")
    for item in (i for i in stacks.items if i.ts == latest):
        where = "in a collective" if item.in_collective else "not in a collective"
        lines.append(f"== rank {item.rank} (node {item.node}, attempt {item.attempt}): {where}")
        lines.append(item.stack.rstrip())
    return "\n".join(lines)


@app.command()
def stacks(
    ctx: typer.Context,
    job_id: JobId,
    recorded: Annotated[
        bool, typer.Option("--recorded", help="Print what was recorded; ask for nothing new.")
    ] = False,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait.")] = 30.0,
    as_json: JsonFlag = False,
) -> None:
    """Record every rank's Python stack of a running job now, and print it (which ranks wait
    in a collective and which are elsewhere); --recorded prints the latest recorded ones (a
    hang's, say) of any job."""
    with state_of(ctx).client() as lb:
        if recorded:
            found = lb.get_stacks(job_id)
        else:
            before = lb.get_stacks(job_id)
            newest = before.items[0].ts if before.items else 0.0
            lb.request_stacks(job_id)
            deadline = time.monotonic() + timeout_s
            while True:
                found = lb.get_stacks(job_id)
                if found.items and found.items[0].ts > newest:
                    break
                if lb.get_job(job_id).is_terminal():
                    # It ended before its worker served the request: what it recorded last.
                    err().print(f"job {job_id} ended; its latest recorded stacks:")
                    break
                if time.monotonic() > deadline:
                    fail(f"no stacks recorded within {timeout_s:g} s (is the job still running?)")
                time.sleep(0.5)
    if as_json:
        print_json(found)
    else:
        typer.echo(format_stacks(found))


@app.command()
def audit(
    ctx: typer.Context,
    owner: Annotated[str | None, typer.Option("--owner")] = None,
    kind: Annotated[
        str | None, typer.Option("--kind", help="e.g. job.submit, or a prefix: job.")
    ] = None,
    since: Annotated[str | None, typer.Option("--since", help="ISO 8601 time.")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 100,
    as_json: JsonFlag = False,
) -> None:
    """The audit log (admin only): who did what, when, from where, with what outcome."""
    with state_of(ctx).client() as lb:
        items = render.plain(lb.list_audit_records(owner, kind, since, limit))
    if as_json:
        print_json({"items": items})
        return
    columns = ["ts", "owner", "kind", "target", "client", "status", "outcome"]
    out().print(render.records_table(items, columns))
