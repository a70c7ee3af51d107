"""How the CLI reads to a person: user text printed as written, help, 80 columns, pipes,
colour, checkpoints."""

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from client.cli import CliState, app
from client.models import Event
from client.watch import JobView
from tests.unit.client.conftest import (
    API_URL,
    FakeApi,
    checkpoint,
    error_body,
    job,
    log_line,
    metric_point,
    reply,
    worker_record,
)

HOSTILE = "[bold]loud[/] [/] [red]x [link=http://e.vil]y[/link] :smile: [#ff0000]"


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAUNCHBAY_API_URL", "LAUNCHBAY_TOKEN", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)


def launchbay(api: FakeApi, *args: str, **env: str) -> Result:
    state = CliState(api_url=API_URL, token="t", transport=api.transport)
    return CliRunner(env={"COLUMNS": "80", **env}).invoke(app, list(args), obj=state)


# User text is never markup


def test_log_lines_print_as_written(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="succeeded")))
    page = {"items": [log_line(1, HOSTILE), log_line(2, "[/]")], "next_after": 2}
    api.on("GET", "/v1/jobs/j1/logs", reply(200, page))
    result = launchbay(api, "logs", "j1")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"[rank 0] {HOSTILE}", "[rank 0] [/]"]


def test_job_names_and_messages_print_as_written(api: FakeApi) -> None:
    hostile = job(name="[bold]n[/]", state="failed", message="[/] boom :smile: [red]")
    api.on("GET", "/v1/jobs/j1", reply(200, hostile))
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": []}))
    api.on("GET", "/v1/jobs", reply(200, {"items": [hostile], "total": 1}))
    status = launchbay(api, "status", "j1")
    assert status.exit_code == 0, status.output
    assert "[bold]n[/]" in status.stdout and "[/] boom :smile: [red]" in status.stdout
    assert "[bold]n[/]" in launchbay(api, "list").stdout
    # The end of a followed job, which prints the message.
    watched = launchbay(api, "watch", "j1")
    assert watched.stdout.strip() == "job j1 failed: [/] boom :smile: [red]"


def test_warnings_are_shown_by_status_watch_and_list(api: FakeApi) -> None:
    said = ["the ranks never trained as one process group [red]of 2[/]", "best_metric 'acc'"]
    warned = job(state="succeeded", exit_reason="completed", warnings=said)
    api.on("GET", "/v1/jobs/j1", reply(200, warned))
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": []}))
    api.on("GET", "/v1/jobs", reply(200, {"items": [warned, job("j2")], "total": 2}))
    status = launchbay(api, "status", "j1", COLUMNS="200")
    assert status.exit_code == 0, status.output
    rows = [line.strip() for line in status.stdout.splitlines()]
    assert f"warnings     {said[0]}" in rows and said[1] in rows
    watched = launchbay(api, "watch", "j1", COLUMNS="200").stdout.splitlines()
    assert watched == [
        "job j1 succeeded (completed)",
        f"warning: {said[0]}",
        f"warning: {said[1]}",
    ]
    listed = launchbay(api, "list", COLUMNS="200").stdout
    assert "succeeded, 2 warnings" in listed and listed.count("warning") == 1
    view = JobView(warned)
    assert f"warning: {said[1]}" in _render(view)


def test_error_messages_print_as_written(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", error_body(404, "not_found", "no job '[/]' [bold]here"))
    result = launchbay(api, "status", "j1")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error not_found: no job '[/]' [bold]here"


def test_the_live_view_prints_log_lines_as_written() -> None:
    view = JobView(job())
    view.apply(Event(id="3", event="log", data=log_line(3, HOSTILE)))
    shown = _render(view)
    assert "[bold]loud[/] [/] [red]x" in shown


def test_help_texts_keep_their_brackets() -> None:
    result = CliRunner(env={"COLUMNS": "120"}).invoke(app, ["logs", "--help"])
    assert "prefixed [rank R] (or [node N/rank R] for a multi-node job)" in _words(result.stdout)


# Help


def test_flags_take_no_value_and_say_so() -> None:
    help_text = CliRunner().invoke(app, ["submit", "--help"]).stdout
    assert "<bool>" not in help_text and "BOOLEAN" not in help_text
    assert any(line.split()[:2] == ["--wait", "Follow"] for line in help_text.splitlines())
    refused = CliRunner().invoke(app, ["submit", "job.yaml", "--wait", "true"])
    assert refused.exit_code == 2  # a usage error, as for any flag given a value


@pytest.mark.parametrize("command", ["worker", "nodes"])
def test_help_paragraphs_wrap_at_the_terminal_width(command: str) -> None:
    help_text = CliRunner(env={"COLUMNS": "80"}).invoke(app, [command, "--help"]).stdout
    lines = help_text.splitlines()
    assert all(len(line) <= 80 for line in lines)
    # A paragraph is refilled to the width: no line stops after a word or two mid-sentence.
    end = min(lines.index(h) for h in ("Arguments:", "Options:") if h in lines)
    description = lines[2:end]
    paragraphs = "\n".join(description).split("\n\n")
    for paragraph in paragraphs:
        rows = [row for row in paragraph.splitlines() if row.strip()]
        assert all(len(row) > 50 for row in rows[:-1]), rows


def test_exit_statuses_are_in_the_help() -> None:
    help_text = _words(CliRunner().invoke(app, ["--help"]).stdout)
    assert "Exit status: 0 ok; 1 the API refused" in help_text
    assert "3 the API cannot be reached" in help_text


# 80 columns


def test_jobs_table_reads_at_80_columns(api: FakeApi) -> None:
    jobs = [
        job("a" * 32, state="succeeded", name="digits-ddp-with-a-rather-long-name"),
        job("b" * 32, state="cancelling", name="x"),
    ]
    api.on("GET", "/v1/jobs", reply(200, {"items": jobs, "total": 2}))
    result = launchbay(api, "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "succeed…" not in result.stdout
    rows = [line for line in lines if line.startswith(("a" * 32, "b" * 32))]
    assert len(rows) == 2  # one line per job: no name wrapped onto a second line
    assert "succeeded" in rows[0] and "cancelling" in rows[1]
    header = lines[0].split()
    assert header == ["id", "name", "state", "step", "loss", "age"]


def test_workers_table_reads_at_80_columns(api: FakeApi) -> None:
    busy = worker_record("gpu-a:4242", state="busy", current_job={"id": "f" * 32})
    api.on("GET", "/v1/workers", reply(200, {"items": [busy]}))
    result = launchbay(api, "workers")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].split() == ["name", "queues", "devices", "heartbeat", "job"]
    assert "[" not in result.stdout and '"' not in result.stdout
    assert "default, gpu8" in result.stdout and "2 cpu" in result.stdout
    assert lines[1].split()[-1] == "f" * 32  # the job's whole id, on one line


def test_tokens_table_reads_at_80_columns(api: FakeApi) -> None:
    token = {
        "name": "ci-runner",
        "role": "admin",
        "created_at": "2024-01-01T00:00:00Z",
        "expires_at": None,
        "revoked_at": None,
        "active": True,
    }
    api.on("GET", "/v1/tokens", reply(200, {"items": [token]}))
    result = launchbay(api, "token", "list")
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert lines[0].split() == ["name", "role", "active", "created_at", "expires_at"]
    assert "2024-01-01 00:00:00" in result.stdout


# Checkpoints


def test_checkpoints_lists_them_with_the_apis_best_and_latest_marks(api: FakeApi) -> None:
    policy = {"checkpoint": {"best_metric": "loss", "best_mode": "min"}}
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="succeeded", spec=policy)))
    # A tie: the API's rule picks the later one (c2), and the CLI shows its mark as given.
    items = [
        checkpoint("c1", 10, metrics={"loss": 0.2}),
        checkpoint("c2", 20, metrics={"loss": 0.2}, best=True),
        checkpoint("c3", 30, metrics={"loss": 0.4}, size=3 * 1024 * 1024, latest=True),
    ]
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": items}))
    result = launchbay(api, "checkpoints", "j1")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert rows["c2"].rstrip().endswith("best")
    assert rows["c3"].rstrip().endswith("latest") and "3.0 MiB" in rows["c3"]
    assert "loss=0.2" in rows["c2"] and "abababababab" in rows["c2"]
    assert not rows["c1"].rstrip().endswith(("best", "latest"))
    assert all(len(line) <= 80 for line in result.stdout.splitlines())

    as_json = json.loads(launchbay(api, "checkpoints", "j1", "--json").stdout)
    assert [(c["id"], c["marks"]) for c in as_json] == [
        ("c1", []),
        ("c2", ["best"]),
        ("c3", ["latest"]),
    ]
    assert [(c["best"], c["latest"]) for c in as_json] == [
        (False, False),
        (True, False),
        (False, True),
    ]
    assert as_json[1]["sha256"] == "ab" * 32


def test_checkpoints_show_the_marks_and_compute_none(api: FakeApi) -> None:
    unmarked = [checkpoint("c1", 10, metrics={"loss": 0.1}), checkpoint("c2", 20)]
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": unmarked}))
    as_json = json.loads(launchbay(api, "checkpoints", "j1", "--json").stdout)
    assert [c["marks"] for c in as_json] == [[], []]
    both = [checkpoint("c1", 10, best=True, latest=True)]
    api.on("GET", "/v1/jobs/j2/checkpoints", reply(200, {"items": both}))
    as_json = json.loads(launchbay(api, "checkpoints", "j2", "--json").stdout)
    assert as_json[0]["marks"] == ["best", "latest"]


def test_status_mentions_the_checkpoints(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", reply(200, job()))
    items = [checkpoint("c1", 10), checkpoint("c2", 20, latest=True)]
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": items}))
    assert "2, latest c2 at step 20" in launchbay(api, "status", "j1").stdout


# Errors, watch, colour


def test_forbidden_says_it_once(api: FakeApi) -> None:
    message = "this needs a token with the admin role"
    api.on("GET", "/v1/tokens", error_body(403, "forbidden", message))
    result = launchbay(api, "token", "list")
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error forbidden: {message}"


def test_forbidden_without_a_reason_hints_at_the_admin_role(api: FakeApi) -> None:
    api.on("GET", "/v1/tokens", error_body(403, "forbidden", "not allowed"))
    result = launchbay(api, "token", "list")
    assert result.stderr.strip() == (
        "error forbidden: not allowed (this needs a token with the admin role)"
    )


def test_watch_labels_the_time_left_and_shows_checkpoints_at_once() -> None:
    unknown = JobView(job(progress={"step": 10, "epoch": 0, "total_steps": 100, "eta_s": None}))
    assert "time left" not in _render(unknown)
    view = JobView(job(progress={"step": 10, "epoch": 0, "total_steps": 100, "eta_s": 125.0}))
    assert "time left 2m0" in _render(view)  # the API's estimate, counted down between reads
    assert "no checkpoint yet" in _render(view)
    view.apply(Event(id="9", event="checkpoint", data=checkpoint("c7", 40)))
    assert "last checkpoint c7 saved at step 40" in _render(view)
    for seq in range(10, 30):  # busy logs do not push it out of sight
        view.apply(Event(id=str(seq), event="log", data=log_line(seq, f"line {seq}")))
    assert "last checkpoint c7 saved at step 40" in _render(view)


def test_colour_only_when_asked_and_never_with_no_color(api: FakeApi) -> None:
    api.on("POST", "/v1/jobs/j1/cancel", reply(202, job(state="cancelling")))
    assert "\x1b[" not in launchbay(api, "cancel", "j1").stdout  # not a terminal
    assert "\x1b[" in launchbay(api, "cancel", "j1", FORCE_COLOR="1").stdout
    assert "\x1b[" not in launchbay(api, "cancel", "j1", FORCE_COLOR="1", NO_COLOR="1").stdout


# Pipes


def test_a_closed_pipe_ends_quietly_with_status_0(tmp_path: Path) -> None:
    """`launchbay metrics ID | head -1`: the reader leaves after one line."""
    program = tmp_path / "many_metrics.py"
    program.write_text(
        textwrap.dedent(
            f"""
            import httpx
            from client.cli import CliState, app
            points = [{metric_point(1, "loss", 0.5)!r} | {{"seq": s, "step": s}}
                      for s in range(1, 20001)]
            def answer(request):
                if request.url.path.endswith("/metrics"):
                    return httpx.Response(200, json={{"items": points, "next_after": 20000}})
                return httpx.Response(404)
            state = CliState(api_url="http://lb.test", transport=httpx.MockTransport(answer))
            app(["metrics", "j1", "--format", "csv"], obj=state)
            """
        )
    )
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    with subprocess.Popen(
        [sys.executable, str(program)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"seq,step,epoch,name,value,ts,attempt\r\n"
        proc.stdout.close()  # what `head` does once it has its line
        stderr = proc.stderr.read().decode()
        status = proc.wait(timeout=60)
    assert stderr == ""
    assert status == 0


def _words(text: str) -> str:
    return " ".join(text.split())


def _render(view: JobView) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=100, color_system=None).print(view.render())
    return buffer.getvalue()


def test_checkpoints_too_wide_for_a_table_come_as_blocks(api: FakeApi) -> None:
    policy = {"checkpoint": {"best_metric": "val_loss"}}
    api.on("GET", "/v1/jobs/j1", reply(200, job(spec=policy)))
    metrics = {"accuracy": 0.9806, "loss": 0.03448, "val_loss": 0.05443}
    items = [checkpoint("a" * 32, 161, metrics=metrics, size=469_900, best=True, latest=True)]
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": items}))
    narrow = launchbay(api, "checkpoints", "j1").stdout.splitlines()
    assert all(len(line) <= 80 for line in narrow)
    assert narrow[:3] == [
        "a" * 32 + "  best,latest",
        "  step 161  epoch 0  458.9 KiB  sha256 abababababab",
        "  accuracy=0.9806 loss=0.03448 val_loss=0.05443",
    ]
    wide = launchbay(api, "checkpoints", "j1", COLUMNS="200").stdout.splitlines()
    assert wide[0].split() == ["id", "step", "epoch", "metrics", "size", "sha256"]
