"""How the CLI shows jobs, metrics, logs and other records: rich tables and plain text."""

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

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


def jobs_table(jobs: list[dict[str, Any]], total: int | None = None) -> Table:
    caption = f"{len(jobs)} of {total} jobs" if total is not None else None
    table = Table(caption=caption, caption_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("name", overflow="fold")
    table.add_column("state")
    table.add_column("step", justify="right")
    table.add_column("loss", justify="right")
    table.add_column("age", justify="right")
    for job in jobs:
        progress = job.get("progress") or {}
        metrics = job.get("latest_metrics") or {}
        table.add_row(
            job.get("id", ""),
            job.get("name", ""),
            state_text(job.get("state")),
            format_number(progress.get("step")),
            format_number(metrics.get("loss")),
            format_age(job.get("created_at")),
        )
    return table


def job_table(job: dict[str, Any]) -> Table:
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
        ("created", job.get("created_at")),
        ("started", job.get("started_at")),
        ("finished", job.get("finished_at")),
        ("progress", _progress_text(progress)),
        ("exit code", job.get("exit_code")),
        ("exit reason", job.get("exit_reason")),
        ("message", job.get("message")),
    ]
    for name, value in sorted((job.get("latest_metrics") or {}).items()):
        rows.append((name, format_number(value)))
    for label, value in rows:
        if value not in (None, ""):
            table.add_row(label, value if isinstance(value, Text) else str(value))
    return table


def metrics_table(points: Iterable[dict[str, Any]]) -> Table:
    """Metric points pivoted: one row per (step, epoch), one column per metric name."""
    rows: dict[tuple[Any, Any], dict[str, Any]] = {}
    names: list[str] = []
    for point in points:
        if point["name"] not in names:
            names.append(point["name"])
        rows.setdefault((point.get("step"), point.get("epoch")), {})[point["name"]] = point["value"]
    table = Table()
    table.add_column("step", justify="right")
    table.add_column("epoch", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for (step, epoch), values in rows.items():
        table.add_row(
            format_number(step),
            format_number(epoch),
            *(format_number(values.get(n)) for n in names),
        )
    return table


def records_table(records: list[dict[str, Any]], columns: list[str] | None = None) -> Table:
    """Flat records (recipes, workers, tokens) as a table; columns default to every key seen."""
    if columns is None:
        columns = []
        for record in records:
            columns.extend(key for key in record if key not in columns)
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(*(_cell(record.get(column)) for column in columns))
    return table


def items_of(body: Any) -> list[dict[str, Any]]:
    """The records of a list answer, whether `{"items": [...]}` or a bare list."""
    if isinstance(body, dict):
        return list(body.get("items") or [])
    return list(body or [])


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
    return ", ".join(parts)


def _cell(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return format_number(value)
