"""What an ML engineer reads all day, at 80 and 120 columns: why a job failed in `list`, a
name pattern, usage that says why it is empty, recipes' hyperparameters, compare, rerun,
code list|rm, the live view's header, piped output without trailing spaces, validation errors
one per line, an ambiguous ref's candidates, a spec file's YAML error with its line."""

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from client.cli import CliState, app
from client.sdk import Client
from client.watch import JobView
from tests.unit.client.conftest import (
    API_URL,
    FakeApi,
    checkpoint,
    error_body,
    job,
    metric_point,
    reply,
    worker_record,
)

A, B = "a" * 32, "b" * 32
TRACEBACK = "rank 1 failed: Traceback (most recent call last):\n  File x\nValueError: " + "y" * 200


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAUNCHBAY_API_URL", "LAUNCHBAY_TOKEN", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)


def launchbay(api: FakeApi, *args: str, columns: int = 80) -> Result:
    state = CliState(api_url=API_URL, token="t", transport=api.transport)
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(app, list(args), obj=state)


def no_trailing_spaces(text: str) -> bool:
    return all(line == line.rstrip() for line in text.splitlines())


# list


@pytest.mark.parametrize("columns", [80, 120])
def test_list_shows_why_a_failed_job_failed_cut_to_the_width(api: FakeApi, columns: int) -> None:
    failed = job(A, "failed", exit_reason="user_error", message=TRACEBACK)
    api.on("GET", "/v1/jobs", reply(200, {"items": [failed, job(B, "running")], "total": 2}))
    result = launchbay(api, "list", "--name", "dig", columns=columns)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= columns for line in lines)
    assert no_trailing_spaces(result.stdout)
    row = next(i for i, line in enumerate(lines) if line.startswith(A))
    why = lines[row + 1]
    assert why.startswith("  user_error: rank 1 failed: Traceback (most recent call last): File")
    assert why.endswith("…") and len(why) == columns
    assert lines[row + 2].startswith(B)  # a running job has no such line
    [sent] = api.sent("GET", "/v1/jobs")
    assert sent.url.params["name_contains"] == "dig" and "name" not in sent.url.params


# usage


def test_an_empty_usage_is_an_empty_table_since_when(api: FakeApi) -> None:
    empty = {"since": "2024-01-01T00:00:00Z", "until": "2024-01-02T00:00:00Z", "items": []}
    api.on("GET", "/v1/usage", reply(200, empty))
    result = launchbay(api, "usage")
    assert result.exit_code == 0, result.output
    assert "since 2024-01-01T00:00:00+00:00" in result.stdout
    assert "dispatcher" not in result.stdout  # every install records usage now


# recipes


RECIPE = {
    "name": "digits",
    "description": "A small CNN on 8x8 digits.",
    "config_schema": {
        "properties": {
            "epochs": {"type": "integer", "default": 10, "description": "Passes."},
            "steps": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "lr": {"type": "number", "default": 0.006, "description": "Peak AdamW lr."},
            "optimizer": {"enum": ["adamw", "sgd"], "default": "adamw"},
        }
    },
}


@pytest.mark.parametrize("columns", [80, 120])
def test_recipes_print_their_hyperparameters(api: FakeApi, columns: int) -> None:
    api.on("GET", "/v1/recipes", reply(200, {"items": [RECIPE]}))
    result = launchbay(api, "recipes", columns=columns)
    assert result.exit_code == 0, result.output
    assert no_trailing_spaces(result.stdout)
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0][:2] == ["digits", "A"]
    assert ["epochs", "integer", "10"] == rows[2][:3]
    assert ["steps", "integer", "or", "null", "null"] == rows[3]
    assert ["lr", "number", "0.006"] == rows[4][:3]
    assert ["optimizer", "adamw|sgd", '"adamw"'] == rows[5]
    assert ("Peak AdamW lr." in result.stdout) is (columns >= 100)
    assert launchbay(api, "recipes", "nope").exit_code == 1


# compare


@pytest.mark.parametrize("columns", [80, 120])
def test_compare_shows_spec_differences_and_last_and_best_metrics(
    api: FakeApi, columns: int
) -> None:
    one = job(A, "succeeded", name="sweep", spec={"config": {"lr": 0.1}, "nproc_per_node": 2})
    two = job(B, "failed", name="sweep", spec={"config": {"lr": 0.01}, "nproc_per_node": 2})
    one["latest_metrics"], two["latest_metrics"] = {"loss": 0.25}, {"loss": 0.75, "acc": 0.5}
    api.on("GET", f"/v1/jobs/{A[:4]}", reply(200, one))
    api.on("GET", "/v1/jobs/sweep@2", reply(200, two))
    best = checkpoint("c1", 40, metrics={"loss": 0.2}, best=True)
    api.on("GET", f"/v1/jobs/{A}/checkpoints", reply(200, {"items": [best]}))
    api.on("GET", f"/v1/jobs/{B}/checkpoints", reply(200, {"items": []}))
    result = launchbay(api, "compare", A[:4], "sweep@2", columns=columns)
    assert result.exit_code == 0, result.output
    assert no_trailing_spaces(result.stdout)
    lines = result.stdout.splitlines()
    assert all(len(line) <= columns for line in lines)
    rows = [line.split() for line in lines]
    assert rows[0] == ["sweep", A[:8], "sweep", B[:8]]
    assert ["state", "succeeded", "failed"] in rows
    assert ["config.lr", "0.1", "0.01"] in rows
    assert not any(row and row[0] == "nproc_per_node" for row in rows)
    assert ["loss", "0.25", "0.75"] in rows and ["acc", "—", "0.5"] in rows
    assert ["step", "40", "—"] in rows and ["loss", "0.2", "—"] in rows
    assert launchbay(api, "compare", A).exit_code == 2


# rerun


def test_rerun_submits_the_spec_again_with_dotted_overrides(api: FakeApi) -> None:
    spec = {"name": "digits-ddp", "recipe": "digits", "nproc_per_node": 1, "config": {}}
    api.on("GET", "/v1/jobs/digits-ddp@1", reply(200, job(A, "failed", spec=spec)))
    api.on("POST", "/v1/jobs", reply(201, job(B, "queued")))
    args = ["--set", "nproc_per_node=2", "--set", "config.lr=0.1"]
    result = launchbay(api, "rerun", "digits-ddp@1", *args)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"submitted job {B} (demo) again from {A}: queued"
    [sent] = api.sent("POST", "/v1/jobs")
    assert json.loads(sent.content) == {**spec, "nproc_per_node": 2, "config": {"lr": 0.1}}


def test_rerun_asks_for_secret_values_and_shows_the_apis_refusal(api: FakeApi) -> None:
    spec = {"name": "x", "recipe": "digits", "env": {"KEY": "***"}, "secret_env": ["KEY"]}
    api.on("GET", f"/v1/jobs/{A}", reply(200, job(A, "failed", spec=spec)))
    refused = launchbay(api, "rerun", A)
    assert refused.exit_code == 1 and "--set env.KEY=..." in refused.stderr
    assert api.sent("POST", "/v1/jobs") == []
    detail = [
        {
            "loc": ["body", "nproc_per_nodes"],
            "msg": "Extra inputs are not permitted",
            "type": "extra_forbidden",
            "did_you_mean": "nproc_per_node",
        },
        {"loc": ["body", "config", "lr"], "msg": "Input should be > 0", "type": "greater_than"},
    ]
    api.on("POST", "/v1/jobs", error_body(422, "validation_error", "invalid request", detail))
    result = launchbay(api, "rerun", A, "--set", "env.KEY=v", "--set", "nproc_per_nodes=2")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error validation_error: invalid request:",
        "  nproc_per_nodes: unknown field (did you mean nproc_per_node?)",
        "  config.lr: Input should be > 0",
    ]


# code list | rm


def test_code_list_and_rm_by_a_unique_prefix(api: FakeApi) -> None:
    uploads = [
        {
            "code_id": code_id,
            "sha256": code_id,
            "size": 2048,
            "filename": "train.py",
            "unpacked_size": 4096,
            "created_at": "2024-01-01T00:00:00Z",
            "in_use": code_id.startswith("c"),
        }
        for code_id in ("c" * 64, "dddd1" + "0" * 59, "dddd2" + "0" * 59)
    ]
    api.on("GET", "/v1/code", reply(200, {"items": uploads}))
    listed = launchbay(api, "code", "list")
    assert listed.exit_code == 0, listed.output
    assert no_trailing_spaces(listed.stdout)
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["code_id", "file", "size", "unpacked", "age", "in", "use"]
    assert lines[1].split()[:2] == ["c" * 12, "train.py"] and lines[1].endswith("yes")
    api.on("DELETE", f"/v1/code/{'c' * 64}", reply(204))
    removed = launchbay(api, "code", "rm", "cccc")
    assert removed.exit_code == 0, removed.output
    assert removed.stdout.strip() == f"deleted code {'c' * 64}"
    ambiguous = launchbay(api, "code", "rm", "dddd")
    assert ambiguous.exit_code == 1
    assert "begins 2 of your uploads" in ambiguous.stderr
    assert api.sent("DELETE", f"/v1/code/dddd1{'0' * 59}") == []


# watch, status


def test_the_live_header_is_cut_with_an_ellipsis_at_80_columns() -> None:
    running = job(A, "running", name="digits-ddp", worker="vm:1609-" + "w" * 30)
    for width in (80, 120):
        buffer = io.StringIO()
        Console(file=buffer, width=width, color_system=None).print(JobView(running).render())
        header = buffer.getvalue().splitlines()[0]
        assert len(header) <= width
        if width == 80:
            assert header.endswith("…") and "  on vm:" in header
        else:
            assert header.endswith("w" * 30)


@pytest.mark.parametrize("columns", [80, 120])
def test_piped_status_has_no_trailing_spaces(api: FakeApi, columns: int) -> None:
    done = job(A, "failed", exit_reason="user_error", message="boom", worker="vm:1")
    api.on("GET", f"/v1/jobs/{A[:6]}", reply(200, done))
    api.on("GET", f"/v1/jobs/{A}/checkpoints", reply(200, {"items": [checkpoint("c1", 5)]}))
    result = launchbay(api, "status", A[:6], columns=columns)
    assert result.exit_code == 0, result.output
    assert "exit reason  user_error" in result.stdout
    assert no_trailing_spaces(result.stdout)


# refs


def test_an_ambiguous_ref_prints_its_candidates(api: FakeApi) -> None:
    candidates = [
        {"id": A, "name": "sweep", "state": "failed", "created_at": "2024-01-02T00:00:00Z"},
        {"id": B, "name": "sweep", "state": "queued", "created_at": "2024-01-01T00:00:00Z"},
    ]
    message = "'sweep' names 2 jobs: give more of the id, or name@N (name@1 the newest)"
    detail = {"ref": "sweep", "candidates": candidates, "more": False}
    api.on("GET", "/v1/jobs/sweep", error_body(409, "ambiguous_id", message, detail))
    result = launchbay(api, "status", "sweep")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"error ambiguous_id: {message}",
        f"  {A}  failed  2024-01-02 00:00:00  sweep",
        f"  {B}  queued  2024-01-01 00:00:00  sweep",
    ]


# spec files


def test_a_yaml_error_names_the_file_and_line(api: FakeApi, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\nrecipe: synthetic\nconfig: {lr: 0.1\n")
    result = launchbay(api, "submit", str(spec))
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {spec}, line 4, column 1: not valid YAML: ")
    assert "<unicode string>" not in result.stderr
    assert api.requests == []


@pytest.mark.parametrize("columns", [80, 120])
def test_tables_of_other_commands_have_no_trailing_spaces_when_piped(
    api: FakeApi, columns: int
) -> None:
    api.on("GET", "/v1/workers", reply(200, {"items": [worker_record("gpu-a:1")]}))
    points = [metric_point(1, "loss", 0.5), metric_point(2, "loss", 0.25)]
    api.on("GET", f"/v1/jobs/{A}/metrics", reply(200, {"items": points, "next_after": 2}))
    api.on("GET", f"/v1/jobs/{A}/checkpoints", reply(200, {"items": [checkpoint("c1", 5)]}))
    for args in (["workers"], ["metrics", A], ["checkpoints", A]):
        result = launchbay(api, *args, columns=columns)
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() and no_trailing_spaces(result.stdout), args


def test_the_sdk_reruns_lists_and_deletes_code(api: FakeApi) -> None:
    spec = {"name": "d", "recipe": "digits", "config": {"lr": 0.1}}
    api.on("GET", "/v1/jobs/d@1", reply(200, job(A, "failed", spec=spec)))
    api.on("POST", "/v1/jobs", reply(201, job(B, "queued")))
    api.on("GET", "/v1/code", reply(200, {"items": []}))
    api.on("DELETE", "/v1/code/abc", reply(204))
    with Client(API_URL, "t", transport=api.transport, backoff_s=0) as lb:
        assert lb.rerun_job("d@1", ["config.lr=0.5", "nnodes=2"]).id == B
        assert lb.list_code() == []
        lb.delete_code("abc")
    [sent] = api.sent("POST", "/v1/jobs")
    assert json.loads(sent.content) == {**spec, "config": {"lr": 0.5}, "nnodes": 2}
