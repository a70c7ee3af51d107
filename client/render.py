"""How the CLI shows jobs, metrics, logs and other records: rich tables and plain text.

Tables are borderless, like kubectl's and docker's, so they read at 80 columns: ids and
states never wrap; names and free text are cut with an ellipsis (`status` shows them whole).
"""

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

STATE_STYLES = {
    "queued": "cyan",
    "starting": "blue",
    "running": "bold blue",
    "cancelling": "yellow",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "yellow",
}


def state_text(state: str | None) -> Text:
    return Text(state or "?", style=STATE_STYLES.get(state or "", ""))


def plain(value: Any) -> Any:
    """SDK records (pydantic models, lists of them) as the JSON the API sent."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def new_table(caption: str | None = None) -> Table:
    return Table(
        box=None,
        caption=caption,
        caption_justify="left",
        pad_edge=False,
        header_style="bold",
    )


def to_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, default=str)


def to_json_line(value: Any) -> str:
    return json.dumps(value, default=str)


def format_number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def format_age(timestamp: str | None, now: datetime | None = None) -> str:
    """`2024-05-01T12:00:00Z` → `3m`, `5h`, `2d` (how long ago)."""
    if not timestamp:
        return ""
    try:
        then = datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def jobs_table(
    jobs: list[dict[str, Any]], total: int | str | None = None, width: int = 80
) -> Table:
    """Jobs, one line each within `width` columns: the name gives way (cut with `…`)."""
    rows = []
    for job in jobs:
        progress = job.get("progress") or {}
        metrics = job.get("latest_metrics") or {}
        rows.append(
            (
                str(job.get("id", "")),
                str(job.get("name", "")),
                _state_in_queue(job),
                format_number(progress.get("step")),
                format_number(metrics.get("loss")),
                format_age(job.get("created_at")),
            )
        )
    headers = ("id", "name", "state", "step", "loss", "age")
    widths = [max([len(h), *(len(str(r[i])) for r in rows)]) for i, h in enumerate(headers)]
    name_width = max(8, width - (sum(widths) - widths[1]) - 2 * (len(headers) - 1))
    table = new_table(f"{len(jobs)} of {total} jobs" if total is not None else None)
    table.add_column("id", no_wrap=True)
    table.add_column("name", no_wrap=True, overflow="ellipsis", max_width=name_width)
    table.add_column("state", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("loss", justify="right", no_wrap=True)
    table.add_column("age", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def queue_table(entries: list[dict[str, Any]], total: int) -> Table:
    """`launchbay queue`: the waiting jobs in the order they will run."""
    table = new_table(f"{len(entries)} of {total} waiting")
    for column in ("#", "id", "owner", "priority", "devices", "queue", "waiting because"):
        table.add_column(column, no_wrap=column != "waiting because", overflow="fold")
    for entry in entries:
        table.add_row(
            _cell(entry.get("position")),
            _cell(entry.get("job_id") or "(another owner's)"),
            _cell(entry.get("owner")),
            _cell(entry.get("priority")),
            f"{entry.get('nnodes', 1)}x{entry.get('nproc_per_node', 1)}",
            _cell(entry.get("queue")),
            _cell(entry.get("pending_reason")),
        )
    return table


def _state_in_queue(job: dict[str, Any]) -> Text:
    """The state, with the place in the queue while the job waits (`queued #3`), and how many
    warnings the job has (`succeeded, 1 warning`: `launchbay status ID` shows them)."""
    text = state_text(job.get("state"))
    if job.get("queue_position") is not None:
        text.append(f" #{job['queue_position']}")
    if warnings := len(job.get("warnings") or []):
        text.append(f", {warnings} warning" + "s" * (warnings > 1), style="yellow")
    return text


def job_table(job: dict[str, Any], checkpoints: list[dict[str, Any]] | None = None) -> Table:
    """One job as `field  value` rows."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    progress = job.get("progress") or {}
    rows: list[tuple[str, Any]] = [
        ("id", job.get("id")),
        ("name", job.get("name")),
        ("state", state_text(job.get("state"))),
        ("attempt", job.get("attempt")),
        ("worker", job.get("worker")),
        ("launch path", job.get("launch_path")),
        ("created", job.get("created_at")),
        ("started", job.get("started_at")),
        ("finished", job.get("finished_at")),
        ("progress", _progress_text(progress)),
        ("queue position", job.get("queue_position")),
        ("waiting because", job.get("pending_reason")),
        ("exit code", job.get("exit_code")),
        ("exit reason", job.get("exit_reason")),
        ("message", job.get("message")),
        ("warnings", Text("\n".join(job.get("warnings") or []), style="yellow")),
    ]
    if checkpoints:
        last = next((c for c in checkpoints if c.get("latest")), None)
        latest = f", latest {last.get('id')} at step {last.get('step')}" if last else ""
        rows.append(("checkpoints", f"{len(checkpoints)}{latest}"))
    for name, value in sorted((job.get("latest_metrics") or {}).items()):
        rows.append((name, format_number(value)))
    for label, value in rows:
        if value not in (None, "") and not (isinstance(value, Text) and not value.plain):
            table.add_row(label, value if isinstance(value, Text) else str(value))
    return table


def metrics_table(points: Iterable[dict[str, Any]]) -> Table:
    """Metric points pivoted: one row per (step, epoch), one column per metric name; with an
    `attempt` column when more than one attempt reported (a retry that resumes reports its
    steps again: each attempt's row is its own)."""
    rows: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    names: list[str] = []
    for point in points:
        if point["name"] not in names:
            names.append(point["name"])
        key = (point.get("attempt"), point.get("step"), point.get("epoch"))
        rows.setdefault(key, {})[point["name"]] = point["value"]
    attempts = len({attempt for attempt, _, _ in rows}) > 1
    table = new_table()
    if attempts:
        table.add_column("attempt", justify="right")
    table.add_column("step", justify="right")
    table.add_column("epoch", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for (attempt, step, epoch), values in rows.items():
        table.add_row(
            *([format_number(attempt)] if attempts else []),
            format_number(step),
            format_number(epoch),
            *(format_number(values.get(n)) for n in names),
        )
    return table


def records_table(records: list[dict[str, Any]], columns: list[str] | None = None) -> Table:
    """Flat records (recipes, nodes, tokens) as a table; columns default to every key seen.
    Headers never break; lists print comma-separated, times as their age."""
    if columns is None:
        columns = []
        for record in records:
            columns.extend(key for key in record if key not in columns)
    table = new_table()
    for column in columns:
        table.add_column(column, overflow="fold", min_width=min(len(column), 12))
    for record in records:
        table.add_row(*(_cell(record.get(column), column) for column in columns))
    return table


def workers_table(workers: list[dict[str, Any]]) -> Table:
    """Workers at 80 columns: the job column says `idle` or the whole id of the job run."""
    table = new_table()
    table.add_column("name", overflow="fold")
    table.add_column("queues")
    table.add_column("devices", no_wrap=True)
    table.add_column("heartbeat", no_wrap=True, justify="right")
    table.add_column("job", no_wrap=True)
    for worker in workers:
        current = worker.get("current_job") or {}
        table.add_row(
            str(worker.get("name", "")),
            ", ".join(str(q) for q in worker.get("queues") or []),
            format_devices(worker.get("devices") or []),
            format_age(worker.get("last_heartbeat")) + " ago",
            str(current.get("id") or worker.get("state") or ""),
        )
    return table


def format_devices(devices: list[str]) -> str:
    """`["cpu:0", "cpu:1"]` → `2 cpu`; CUDA ids → `gpu 0,1`."""
    cpus = [d for d in devices if str(d).startswith("cpu:")]
    if cpus and len(cpus) == len(devices):
        return f"{len(cpus)} cpu"
    return "gpu " + ",".join(str(d) for d in devices) if devices else ""


def checkpoint_marks(item: dict[str, Any]) -> list[str]:
    """`["best", "latest"]`: the marks the API put on a listed checkpoint (it decides them)."""
    return [mark for mark in ("best", "latest") if item.get(mark)]


def checkpoints_view(checkpoints: list[dict[str, Any]], console: Console) -> RenderableType:
    """A table when it fits the console's width, else one short block per checkpoint."""
    table = checkpoints_table(checkpoints)
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural <= console.width:
        return table
    blocks: list[RenderableType] = []
    for item in checkpoints:
        metrics = item.get("metrics") or {}
        blocks.append(
            Text(
                f"{item.get('id')}  {','.join(checkpoint_marks(item))}".rstrip()
                + f"\n  step {format_number(item.get('step'))}"
                + f"  epoch {format_number(item.get('epoch'))}"
                + f"  {checkpoint_size(item)}  sha256 {str(item.get('sha256'))[:12]}"
                + ("\n  " + _metrics_text(metrics) if metrics else "")
            )
        )
    blocks.append(Text(f"{len(checkpoints)} checkpoints" if checkpoints else "no checkpoints"))
    return Group(*blocks)


def _metrics_text(metrics: dict[str, Any]) -> str:
    return " ".join(f"{k}={format_number(v)}" for k, v in sorted(metrics.items()))


def checkpoints_table(checkpoints: list[dict[str, Any]]) -> Table:
    table = new_table(f"{len(checkpoints)} checkpoints" if checkpoints else "no checkpoints")
    table.add_column("id", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("epoch", justify="right", no_wrap=True)
    table.add_column("metrics", overflow="fold", min_width=12)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("sha256", no_wrap=True)
    table.add_column("", no_wrap=True)
    for item in checkpoints:
        metrics = item.get("metrics") or {}
        table.add_row(
            str(item.get("id", "")),
            format_number(item.get("step")),
            format_number(item.get("epoch")),
            _metrics_text(metrics),
            checkpoint_size(item),
            str(item.get("sha256") or "")[:12],
            ",".join(checkpoint_marks(item)),
        )
    return table


def checkpoint_size(item: dict[str, Any]) -> str:
    """`12.0 MiB`, or for a directory checkpoint `12.0 MiB (dir, 5 files)`."""
    if item.get("kind") == "dir":
        return f"{format_size(item.get('size'))} (dir, {item.get('files')} files)"
    return format_size(item.get("size"))


def format_size(size: Any) -> str:
    if not isinstance(size, int):
        return ""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(size)


def format_log(item: dict[str, Any], with_rank: bool, with_node: bool = False) -> str:
    """A log line, prefixed `[rank R]`, or `[node N/rank R]` for a multi-node job."""
    if with_node:
        return f"[node {item.get('node')}/rank {item.get('rank')}] {item['line']}"
    return f"[rank {item.get('rank')}] {item['line']}" if with_rank else str(item["line"])


def _progress_text(progress: dict[str, Any]) -> str:
    step, epoch, total = progress.get("step"), progress.get("epoch"), progress.get("total_steps")
    parts = []
    if step is not None:
        parts.append(f"step {step}" + (f"/{total}" if total else ""))
    if epoch is not None:
        parts.append(f"epoch {epoch}")
    if progress.get("eta_s") is not None:
        parts.append(f"{format_eta(progress['eta_s'])} left")
    return ", ".join(parts)


def format_eta(seconds: Any) -> str:
    """`45s`, `3m20s`, `2h05m`: the time a running job has left (`progress.eta_s`)."""
    if not isinstance(seconds, int | float) or seconds != seconds or seconds < 0:
        return "?"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _cell(value: Any, column: str = "") -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={format_number(v)}" for k, v in value.items())
    if isinstance(value, str) and column.endswith("_at") and value[:4].isdigit():
        return value[:19].replace("T", " ")
    return format_number(value)
