"""The CLI's and the dashboard's lists of job states are `JobState`'s, in its order."""

import json
import re
from pathlib import Path

from client import render
from client.watch import EXIT_CODES
from jobs.states import TERMINAL_STATES, JobState

DOM_JS = Path(__file__).resolve().parents[3] / "service" / "static" / "js" / "dom.js"


def _js_list(source: str, pattern: str) -> list[str]:
    match = re.search(pattern, source, re.S)
    assert match, f"{pattern} not found in {DOM_JS}"
    return list(json.loads(f"[{match.group(1).rstrip().rstrip(',')}]"))


def test_the_cli_knows_every_state() -> None:
    assert list(render.STATE_STYLES) == [s.value for s in JobState]
    assert set(EXIT_CODES) == {s.value for s in TERMINAL_STATES}


def test_the_dashboard_knows_every_state() -> None:
    source = DOM_JS.read_text()
    states = _js_list(source, r"export const STATES = \[(.*?)\];")
    terminal = _js_list(source, r"export const TERMINAL = new Set\(\[(.*?)\]\);")
    assert states == [s.value for s in JobState]
    assert set(terminal) == {s.value for s in TERMINAL_STATES}
