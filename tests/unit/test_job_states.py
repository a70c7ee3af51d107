"""The transition table (`jobs.states.ALLOWED_TRANSITIONS`) and `sources_of`, the one check
every state change of the store goes through (tests/integration/test_state_transitions.py
drives the store itself)."""

import ast
from pathlib import Path

import pytest

from jobs.states import (
    ACTIVE_STATES,
    ALLOWED_TRANSITIONS,
    TERMINAL_STATES,
    ForbiddenTransition,
    JobState,
    sources_of,
)

ROOT = Path(__file__).resolve().parents[2]


def test_sources_of_a_target_are_the_tables() -> None:
    for target in JobState:
        expected = {s for s, allowed in ALLOWED_TRANSITIONS.items() if target in allowed}
        assert sources_of(target) == expected
    assert sources_of(JobState.QUEUED) == {
        JobState.STARTING,
        JobState.RUNNING,
        JobState.CANCELLING,
    }


def test_a_narrower_set_is_checked_against_the_table() -> None:
    preempted = [JobState.STARTING, JobState.RUNNING, JobState.CANCELLING]
    assert sources_of(JobState.QUEUED, preempted) == set(preempted)
    with pytest.raises(ForbiddenTransition, match="succeeded to queued"):
        sources_of(JobState.QUEUED, [JobState.RUNNING, JobState.SUCCEEDED])
    with pytest.raises(ForbiddenTransition):
        sources_of(JobState.CANCELLING, [JobState.QUEUED])


def test_terminal_states_are_left_by_no_move_and_active_ones_are_the_attempts() -> None:
    assert all(not ALLOWED_TRANSITIONS[s] for s in TERMINAL_STATES)
    assert all(s.is_terminal() == (s in TERMINAL_STATES) for s in JobState)
    assert ACTIVE_STATES == set(JobState) - TERMINAL_STATES - {JobState.QUEUED}
    assert JobState.CANCELLING.can_become(JobState.QUEUED)
    assert not JobState.QUEUED.can_become(JobState.RUNNING)


JOB_TABLES = {"Job", "JOB_TABLE", "_job"}


def _updated_table(call: ast.Call) -> str | None:
    """The table of the `update(X)` or `insert(X)` a `.values(...)` call is chained on, if any."""
    node: ast.AST = call.func
    while isinstance(node, ast.Attribute | ast.Call):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("update", "insert"):
            return getattr(node.args[0], "id", None) if node.args else None
        node = node.func if isinstance(node, ast.Call) else node.value
    return None


def _state_keys(node: ast.AST) -> bool:
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "state" for k in node.keys
    )


def _writes_a_state(function: ast.AST) -> bool:
    """Whether the function gives `state` to a `.values(...)`: by keyword, in a dict, or in a
    dict it built first and passes as `**name`, on a job-table UPDATE or on a statement."""
    built = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign | ast.AnnAssign) and _state_keys(node.value or ast.Pass()):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            built |= {t.id for t in targets if isinstance(t, ast.Name)}
    for node in ast.walk(function):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "values"):
            continue
        if _updated_table(node) not in {*JOB_TABLES, None}:
            continue  # a node's or another table's row
        names = {k.arg for k in node.keywords}
        spread = {getattr(k.value, "id", None) for k in node.keywords if k.arg is None}
        if "state" in names or any(map(_state_keys, node.args)) or spread & built:
            return True
    return False


def test_only_the_lifecycles_move_updates_a_jobs_state() -> None:
    """`move` (service/records/lifecycle.py) sets `state` from the sources `sources_of` checked;
    any other UPDATE that names `state` in its values would bypass the table."""
    writers = []
    for path in [*ROOT.glob("service/**/*.py"), *ROOT.glob("worker/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and _writes_a_state(node):
                writers.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert writers == ["service/records/lifecycle.py:move"]
