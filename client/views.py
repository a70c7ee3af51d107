"""Views the CLI composes from several records: the jobs list with why each failed job failed,
recipes with their hyperparameters, jobs compared side by side, code uploads. The API decides
every fact shown (the best checkpoint, the latest metrics); this lays them out at a width."""

import json
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from client.render import format_age, format_number, format_size, jobs_table, new_table

ELLIPSIS = "…"


def cut(text: str, width: int) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis when longer."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    return flat[: max(0, width - 1)] + ELLIPSIS


def failure_text(job: dict[str, Any]) -> str:
    """Why a failed job failed, `<exit reason>: <message>`; '' for any other job."""
    if job.get("state") != "failed":
        return ""
    reason, message = job.get("exit_reason") or "", job.get("message") or ""
    return f"{reason}: {message}" if reason and message else reason or message


def jobs_view(jobs: list[dict[str, Any]], total: int | str | None, console: Console) -> Group:
    """The jobs table, with under each failed job's row its exit reason and message, cut
    with an ellipsis to the console's width."""
    table = jobs_table(jobs, total, console.width)
    lines = console.render_lines(table, console.options, pad=False)
    parts: list[RenderableType] = []
    for index, line in enumerate(lines):
        parts.append(Segments([*line, Segment.line()]))
        job = jobs[index - 1] if 1 <= index <= len(jobs) else {}
        if why := failure_text(job):
            parts.append(Text("  " + cut(why, console.width - 2), style="red"))
    return Group(*parts)


def schema_type(prop: dict[str, Any]) -> str:
    """A JSON Schema property's type, for a person: `integer`, `number or null`, `a|b`."""
    if "enum" in prop:
        return "|".join(str(v) for v in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(schema_type(p) for p in prop["anyOf"] if isinstance(p, dict))
    kind = prop.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind == "array" and isinstance(prop.get("items"), dict):
        return f"list of {schema_type(prop['items'])}"
    return str(kind or "any")


def hyperparameters(schema: dict[str, Any]) -> list[dict[str, str]]:
    """`[{"name", "type", "default", "description"}]` of a recipe's config schema."""
    rows = []
    required = set(schema.get("required") or [])
    for name, prop in (schema.get("properties") or {}).items():
        if not isinstance(prop, dict):
            continue
        if "default" in prop:
            default = json.dumps(prop["default"])
        else:
            default = "(required)" if name in required else ""
        rows.append(
            {
                "name": name,
                "type": schema_type(prop),
                "default": default,
                "description": str(prop.get("description") or ""),
            }
        )
    return rows


def recipe_view(recipe: dict[str, Any], width: int) -> Group:
    """A recipe: its name and description, then a row per hyperparameter."""
    head = Text(recipe.get("name", ""), style="bold")
    if recipe.get("description"):
        head.append(f"  {recipe['description']}")
    table = new_table()
    table.add_column("  hyperparameter", no_wrap=True)
    table.add_column("type", no_wrap=True, overflow="ellipsis", max_width=24)
    table.add_column("default", no_wrap=True, overflow="ellipsis", max_width=16)
    if width >= 100:
        table.add_column("description", overflow="fold")
    for row in hyperparameters(recipe.get("config_schema") or {}):
        cells = [f"  {row['name']}", row["type"], row["default"]]
        table.add_row(*cells, *([row["description"]] if width >= 100 else []))
    return Group(head, table)


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """`{"config": {"lr": 0.1}}` → `{"config.lr": "0.1"}` (as the dashboard's compare page)."""
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for key, inner in value.items():
            flat.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if not prefix:
        return {}
    return {prefix: value if isinstance(value, str) else json.dumps(value)}


def compare_label(job: dict[str, Any]) -> str:
    """A job's column: its name and the first characters of its id."""
    return f"{job.get('name', '')} {str(job.get('id', ''))[:8]}"


def compare_view(jobs: list[dict[str, Any]], best: list[dict[str, Any] | None]) -> Table:
    """Jobs side by side: state, the spec keys that differ, the latest value of each metric,
    and the metrics of the checkpoint the API marks best (`best[i]`, None: no checkpoint)."""
    table = new_table()
    table.add_column("", style="bold", overflow="fold")
    for job in jobs:
        table.add_column(compare_label(job), overflow="fold")
    table.add_row("state", *(str(j.get("state", "")) for j in jobs))
    specs = [flatten(j.get("spec") or {}) for j in jobs]
    keys = sorted({key for spec in specs for key in spec})
    differing = [k for k in keys if len({spec.get(k, "—") for spec in specs}) > 1]
    table.add_section()
    table.add_row(Text("spec", style="dim"), *("" for _ in jobs))
    for key in differing:
        table.add_row(key, *(spec.get(key, "—") for spec in specs))
    same = len(keys) - len(differing)
    others = f"({same} other key{'s' * (same != 1)} the same)"
    table.add_row(Text(others, style="dim"), *("" for _ in jobs))
    _metric_rows(table, "last", [j.get("latest_metrics") or {} for j in jobs])
    best_metrics = [(b or {}).get("metrics") or {} for b in best]
    _metric_rows(table, "best checkpoint", best_metrics, best)
    return table


def _metric_rows(
    table: Table,
    title: str,
    values: list[dict[str, Any]],
    checkpoints: list[dict[str, Any] | None] | None = None,
) -> None:
    table.add_section()
    table.add_row(Text(title, style="dim"), *("" for _ in values))
    if checkpoints is not None:
        steps = [format_number(c.get("step")) if c else "—" for c in checkpoints]
        table.add_row("step", *steps)
    names = sorted({name for metrics in values for name in metrics})
    for name in names:
        table.add_row(name, *(format_number(m.get(name)) if name in m else "—" for m in values))


def code_table(uploads: list[dict[str, Any]]) -> Table:
    """Code uploads: the first 12 characters of each code_id (any unique prefix is taken
    back by `code rm`; `--json` has them whole)."""
    table = new_table(f"{len(uploads)} uploads" if uploads else "no uploads")
    table.add_column("code_id", no_wrap=True)
    table.add_column("file", overflow="ellipsis", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("unpacked", justify="right", no_wrap=True)
    table.add_column("age", justify="right", no_wrap=True)
    table.add_column("in use", no_wrap=True)
    for item in uploads:
        table.add_row(
            str(item.get("code_id", ""))[:12],
            str(item.get("filename", "")),
            format_size(item.get("size")),
            format_size(item.get("unpacked_size")),
            format_age(item.get("created_at")),
            "yes" if item.get("in_use") else "",
        )
    return table


def runs_view(
    runs: list[dict[str, Any]], fields: list[str], metrics: list[str], sort: str | None
) -> Table:
    """One row per run: name, id, state, the spec `fields` (dotted) and each of `metrics`' last
    and best value; `sort` is a column (`name`, `state`, a field, `last:NAME`, `best:NAME`),
    `-` before it for descending. Defaults: the fields whose values differ between the runs,
    and up to 3 metrics, `loss` first."""
    specs = [flatten(run["job"].get("spec") or {}) for run in runs]
    if not fields:
        keys = sorted({key for spec in specs for key in spec} - {"name"})
        fields = [k for k in keys if len({spec.get(k, "—") for spec in specs}) > 1][:6]
    if not metrics:
        names = {name for run in runs for name in run["metrics"]}
        metrics = sorted(names, key=lambda n: (n != "loss", "loss" not in n, n))[:3]
    columns: list[tuple[str, Any]] = [
        ("name", lambda run, spec: run["job"]["name"]),
        ("id", lambda run, spec: run["job"]["id"][:12]),
        ("state", lambda run, spec: run["job"]["state"]),
        *((field, lambda run, spec, f=field: spec.get(f, "—")) for field in fields),
        *(
            (
                f"{which}:{name}",
                lambda run, spec, w=which, n=name: (run["metrics"].get(n) or {}).get(w),
            )
            for name in metrics
            for which in ("last", "best")
        ),
    ]
    rows = list(zip(runs, specs, strict=True))
    if sort:
        key = sort.removeprefix("-")
        found = next((value for label, value in columns if label == key), None)
        if found is None:
            raise ValueError(f"no column {key!r}: {', '.join(label for label, _ in columns)}")
        present = [r for r in rows if found(*r) not in (None, "—")]
        absent = [r for r in rows if found(*r) in (None, "—")]
        present.sort(key=lambda r: _sort_key(found(*r)), reverse=sort.startswith("-"))
        rows = present + absent  # empty values last, whichever the direction
    table = new_table()
    for label, _ in columns:
        numeric = label.startswith(("last:", "best:"))
        table.add_column(label, justify="right" if numeric else "left", overflow="fold")
    for run, spec in rows:
        table.add_row(
            *(
                format_number(value(run, spec))
                if label.startswith(("last:", "best:"))
                else str(value(run, spec))
                for label, value in columns
            )
        )
    return table


def _sort_key(value: Any) -> tuple[int, float, str]:
    """Numbers (also as text, as flattened spec values are) by value, then the rest as text."""
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))
