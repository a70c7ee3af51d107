"""The report of a GPU check: one row per check, as JSON and as a markdown table.

`report.json` is a list of rows `{"check", "status", "value", "unit", "detail"}` (DESIGN.md,
"Scripts"); `status` is `pass`, `fail` or `not_run`. `report.md` is the same rows under a
header naming the machine and how long the check took.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Status = Literal["pass", "fail", "not_run"]
EXCERPT_LINES = 8
EXCERPT_CHARS = 1200


@dataclass(frozen=True)
class Row:
    check: str
    status: Status
    value: float | int | str | None = None
    unit: str = ""
    detail: str = ""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def passed(check: str, value: float | int | str | None, unit: str, detail: str) -> Row:
    return Row(check, "pass", value, unit, detail)


def failed(check: str, detail: str, value: float | int | str | None = None, unit: str = "") -> Row:
    return Row(check, "fail", value, unit, detail)


def not_run(check: str, reason: str) -> Row:
    return Row(check, "not_run", None, "", reason)


def verdict(check: str, ok: bool, value: float | int | str | None, unit: str, detail: str) -> Row:
    return Row(check, "pass" if ok else "fail", value, unit, detail)


def excerpt(lines: list[str], pattern: str | None = None, limit: int = EXCERPT_LINES) -> str:
    """The lines that prove a row (those containing `pattern`, when given), the last `limit`
    of them, cut to EXCERPT_CHARS."""
    chosen = [line for line in lines if pattern is None or pattern in line][-limit:]
    text = "\n".join(chosen)
    return text if len(text) <= EXCERPT_CHARS else "..." + text[-EXCERPT_CHARS:]


def write_report(folder: Path, rows: list[Row], machine: str, took_s: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps([r.as_json() for r in rows], indent=2) + "\n")
    (folder / "report.md").write_text(render_markdown(rows, machine, took_s))


def render_markdown(rows: list[Row], machine: str, took_s: float) -> str:
    counts = {s: sum(r.status == s for r in rows) for s in ("pass", "fail", "not_run")}
    lines = [
        "# GPU check",
        "",
        f"{machine}",
        "",
        f"{len(rows)} checks in {took_s:.0f} s: {counts['pass']} pass, {counts['fail']} fail, "
        f"{counts['not_run']} not run.",
        "",
        "| check | status | value | detail |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        value = "" if row.value is None else f"{_number(row.value)} {row.unit}".strip()
        lines.append(f"| {row.check} | {row.status} | {value} | {_cell(row.detail)} |")
    return "\n".join(lines) + "\n"


def _number(value: float | int | str) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def _cell(text: str) -> str:
    """A detail in one table cell: pipes escaped, its lines joined by <br>."""
    return text.replace("|", "\\|").replace("\n", "<br>")
