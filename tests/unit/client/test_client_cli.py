"""The `launchbay` CLI against a fake API: output, and the exit status of each outcome."""

import csv
import io
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from client.cli import CliState, app
from client.sdk import Client
from tests.unit.client.conftest import API_URL, FakeApi, error_body, job, reply, worker_record
from tests.unit.client.test_client_download import URL as DOWNLOAD_URL
from tests.unit.client.test_client_download import FileServer
from tests.unit.client.test_client_sse import EVENTS, sse

LOGS = "/v1/jobs/j1/logs"


@pytest.fixture(autouse=True)
def _quiet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAUNCHBAY_API_URL", "LAUNCHBAY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Client, "_backoff", lambda self, attempt, server_ms=None: None)


def launchbay(api: FakeApi, *args: str, token: str | None = None) -> Result:
    state = CliState(api_url=API_URL, token=token, transport=api.transport)
    return CliRunner().invoke(app, list(args), obj=state)


def test_unreachable_api_exits_3_with_a_hint(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs", httpx.ConnectError("[Errno 111] Connection refused"))
    result = launchbay(api, "list")
    assert result.exit_code == 3
    assert f"cannot reach Launchbay at {API_URL}" in result.stderr
    assert "is `launchbay api` running? set LAUNCHBAY_API_URL" in result.stderr
    assert "Traceback" not in result.output


def test_401_talks_about_the_token(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", error_body(401, "unauthorized", "missing bearer token"))
    result = launchbay(api, "status", "j1")
    assert result.exit_code == 1
    assert "error unauthorized: missing bearer token" in result.stderr
    assert "LAUNCHBAY_TOKEN" in result.stderr


def test_api_error_prints_code_and_message(api: FakeApi) -> None:
    api.on("DELETE", "/v1/jobs/j1", error_body(409, "conflict", "job j1 is still running"))
    result = launchbay(api, "delete", "j1")
    assert result.exit_code == 1
    assert result.stderr.strip() == "error conflict: job j1 is still running"


def test_the_token_option_is_sent(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", reply(200, job()))
    api.on("GET", "/v1/jobs/j1/checkpoints", reply(200, {"items": []}))
    assert launchbay(api, "status", "j1", token="s3cret").exit_code == 0
    assert api.requests[0].headers["Authorization"] == "Bearer s3cret"


def test_submit_applies_set_overrides(api: FakeApi, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nrecipe: synthetic\nconfig: {lr: 0.1}\n")
    api.on("POST", "/v1/jobs", reply(201, job(state="queued")))
    result = launchbay(
        api, "submit", str(spec), "--set", "config.lr=0.01", "--set", "nproc_per_node=1"
    )
    assert result.exit_code == 0, result.output
    assert "submitted job j1" in result.stdout
    body = json.loads(api.requests[0].content)
    assert body == {
        "name": "demo",
        "recipe": "synthetic",
        "config": {"lr": 0.01},
        "nproc_per_node": 1,
    }
    assert "Idempotency-Key" not in api.requests[0].headers


def test_submit_json_prints_only_json(api: FakeApi, tmp_path: Path) -> None:
    spec = tmp_path / "job.json"
    spec.write_text('{"name": "demo", "recipe": "synthetic"}')
    api.on("POST", "/v1/jobs", reply(201, job(state="queued")))
    result = launchbay(api, "submit", str(spec), "--idempotency-key", "k1", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["id"] == "j1"
    assert api.requests[0].headers["Idempotency-Key"] == "k1"


def test_submit_refuses_a_bad_override(api: FakeApi, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\n")
    result = launchbay(api, "submit", str(spec), "--set", "config.lr")
    assert result.exit_code == 1
    assert "is not KEY=VALUE" in result.stderr
    assert api.requests == []


@pytest.mark.parametrize(("state", "code"), [("succeeded", 0), ("failed", 1), ("cancelled", 2)])
def test_submit_wait_json_exits_by_final_state(
    api: FakeApi, tmp_path: Path, state: str, code: int
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nrecipe: synthetic\n")
    api.on("POST", "/v1/jobs", reply(201, job(state="queued")))
    api.on("GET", "/v1/jobs/j1", reply(200, job(state=state)))
    result = launchbay(api, "submit", str(spec), "--wait", "--json")
    assert result.exit_code == code
    assert json.loads(result.stdout)["state"] == state


def test_submit_wait_follows_the_job(api: FakeApi, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: demo\nrecipe: synthetic\n")
    api.on("POST", "/v1/jobs", reply(201, job(state="queued")))
    final = job(state="failed", exit_reason="oom", message="CUDA out of memory")
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="queued")), reply(200, final))
    api.on("GET", EVENTS, reply(200, content=_stream_ending("failed", "oom")))
    api.on("GET", LOGS, reply(200, {"items": [], "next_after": 0}))
    result = launchbay(api, "submit", str(spec), "--wait")
    assert result.exit_code == 1, result.output
    assert "submitted job j1 (demo)" in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "job j1 failed (oom): CUDA out of memory"


def _stream_ending(state: str, reason: str, message: str | None = None) -> bytes:
    return sse(
        (1, "state", {"state": "running"}),
        (2, "metric", {"step": 50, "epoch": 0, "name": "loss", "value": 0.25}),
        (3, "log", {"seq": 3, "rank": 1, "line": "epoch 0 done"}),
        (4, "state", {"state": state, "exit_reason": reason, "message": message}),
    )


@pytest.mark.parametrize(
    ("state", "reason", "message", "code"),
    [
        ("succeeded", "completed", None, 0),
        ("failed", "user_error", "ValueError: boom", 1),
        ("cancelled", "cancelled", None, 2),
    ],
)
def test_watch_follows_events_and_exits_by_final_state(
    api: FakeApi, state: str, reason: str, message: str | None, code: int
) -> None:
    final = job(state=state, exit_reason=reason, message=message)
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="queued")), reply(200, final))
    api.on("GET", EVENTS, reply(200, content=_stream_ending(state, reason, message)))
    api.on("GET", LOGS, reply(200, {"items": [], "next_after": 0}))
    result = launchbay(api, "watch", "j1")
    assert result.exit_code == code, result.output
    last_line = result.stdout.strip().splitlines()[-1]
    assert last_line == f"job j1 {state} ({reason})" + (f": {message}" if message else "")


def test_watch_opens_with_the_logs_tail_and_follows_from_its_seq(api: FakeApi) -> None:
    """A long job is not replayed: the last lines, oldest first, then events after them."""
    final = job(state="succeeded", exit_reason="completed")
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="running")), reply(200, final))
    tail = [
        {"seq": 1_000_000 - i, "rank": 0, "node": 0, "ts": 0.0, "line": f"late {i}"}
        for i in range(3)
    ]
    api.on("GET", LOGS, reply(200, {"items": tail, "next_after": 1_000_001}))
    ending = sse((1_000_002, "state", {"state": "succeeded", "exit_reason": "completed"}))
    api.on("GET", EVENTS, reply(200, content=ending))
    result = launchbay(api, "watch", "j1")
    assert result.exit_code == 0, result.output
    printed = result.stdout
    assert printed.index("late 2") < printed.index("late 1") < printed.index("late 0")
    (asked,) = api.sent("GET", LOGS)
    assert dict(asked.url.params) == {"order": "desc", "limit": "8", "after": "0"}
    assert [r.headers.get("Last-Event-ID") for r in api.sent("GET", EVENTS)] == ["1000001"]


def test_watch_of_an_ended_job_prints_its_end_at_once(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="failed", exit_reason="oom")))
    result = launchbay(api, "watch", "j1")
    assert result.exit_code == 1
    assert "job j1 failed (oom)" in result.stdout
    assert api.sent("GET", EVENTS) == []


def test_watch_polls_when_the_stream_fails(api: FakeApi) -> None:
    api.on(
        "GET",
        "/v1/jobs/j1",
        reply(200, job(state="running")),
        reply(200, job(state="running")),
        reply(200, job(state="succeeded", exit_reason="completed")),
    )
    api.on("GET", EVENTS, error_body(503, "unavailable", "stream down"))
    lines = {"items": [{"seq": 9, "rank": 0, "node": 0, "ts": 1.0, "line": "hi"}], "next_after": 9}
    api.on("GET", "/v1/jobs/j1/logs", reply(200, lines), reply(200, {"items": [], "next_after": 9}))
    result = launchbay(api, "watch", "j1")
    assert result.exit_code == 0, result.output
    assert "job j1 succeeded (completed)" in result.stdout


def test_watch_exits_3_when_the_api_goes_away(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", reply(200, job()), httpx.ConnectError("refused"))
    api.on("GET", EVENTS, httpx.ConnectError("refused"))
    result = launchbay(api, "watch", "j1")
    assert result.exit_code == 3
    assert "cannot reach Launchbay" in result.stderr


def test_list_json_is_machine_readable(api: FakeApi) -> None:
    page = {"items": [job(), job("j2", state="failed")], "total": 2, "total_is_estimate": False}
    api.on("GET", "/v1/jobs", reply(200, page))
    result = launchbay(api, "list", "--state", "failed", "--limit", "2", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == page
    assert dict(api.requests[0].url.params) == {"state": "failed", "limit": "2", "offset": "0"}


def test_list_table_shows_the_columns(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs", reply(200, {"items": [job()], "total": 1}))
    result = launchbay(api, "list")
    assert result.exit_code == 0
    for text in ("id", "name", "state", "step", "loss", "age", "j1", "running", "0.5"):
        assert text in result.stdout


def test_logs_follow_prints_until_the_job_ends(api: FakeApi) -> None:
    def page(*seqs: int) -> Any:
        items = [{"seq": s, "rank": s % 2, "node": 0, "ts": 0.0, "line": f"line {s}"} for s in seqs]
        return reply(200, {"items": items, "next_after": seqs[-1] if seqs else 0})

    running, failed = reply(200, job(state="running")), reply(200, job(state="failed"))
    api.on("GET", "/v1/jobs/j1", running, running, failed)
    api.on("GET", "/v1/jobs/j1/logs", page(1, 2), page(3), page())
    result = launchbay(api, "logs", "j1", "-f", "--poll", "0")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["[rank 1] line 1", "[rank 0] line 2", "[rank 1] line 3"]
    afters = [r.url.params["after"] for r in api.sent("GET", "/v1/jobs/j1/logs")]
    assert afters == ["0", "2", "3"]


def test_logs_json_for_one_rank(api: FakeApi) -> None:
    item = {"seq": 1, "rank": 1, "node": 0, "ts": 0.0, "line": "x"}
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="succeeded")))
    api.on("GET", "/v1/jobs/j1/logs", reply(200, {"items": [item], "next_after": 1}))
    result = launchbay(api, "logs", "j1", "--rank", "1", "--json")
    assert [json.loads(line) for line in result.stdout.splitlines()] == [item]
    assert api.sent("GET", "/v1/jobs/j1/logs")[0].url.params["rank"] == "1"


def test_logs_of_a_multi_node_job_are_labelled_node_and_rank(api: FakeApi) -> None:
    items = [
        {"seq": 1, "rank": 0, "node": 1, "ts": 0.0, "line": "a"},
        {"seq": 2, "rank": 1, "node": 0, "ts": 0.0, "line": "b"},
    ]
    multi = job(state="succeeded", spec={"nnodes": 2, "config": {}})
    api.on("GET", "/v1/jobs/j1", reply(200, multi))
    api.on("GET", "/v1/jobs/j1/logs", reply(200, {"items": items, "next_after": 2}))
    result = launchbay(api, "logs", "j1")
    assert result.stdout.splitlines() == ["[node 1/rank 0] a", "[node 0/rank 1] b"]
    result = launchbay(api, "logs", "j1", "--node", "1")
    assert api.sent("GET", "/v1/jobs/j1/logs")[-1].url.params["node"] == "1"


def test_nodes_lists_each_node_of_each_attempt(api: FakeApi) -> None:
    node = {
        "attempt": 1,
        "node": 0,
        "worker": "gpu-a:12",
        "host": "gpu-a",
        "endpoint": "gpu-a:29400",
        "state": "succeeded",
        "joined_at": "2024-01-01T00:00:00Z",
        "last_heartbeat": "2024-01-01T00:00:01Z",
        "finished_at": None,
        "exit_code": 0,
        "exit_reason": "completed",
        "message": None,
    }
    api.on("GET", "/v1/jobs/j1/nodes", reply(200, {"items": [node]}))
    result = launchbay(api, "nodes", "j1")
    assert result.exit_code == 0, result.output
    for text in ("gpu-a:12", "gpu-a:29400", "succeeded", "completed"):
        assert text in result.stdout
    assert json.loads(launchbay(api, "nodes", "j1", "--json").stdout) == {"items": [node]}


def test_metrics_csv(api: FakeApi) -> None:
    points = [
        {"seq": 1, "step": 1, "epoch": 0, "name": "loss", "value": 0.5, "ts": 1.0, "attempt": 1},
        {
            "seq": 2,
            "step": 1,
            "epoch": 0,
            "name": "accuracy",
            "value": 0.8,
            "ts": 1.0,
            "attempt": 1,
        },
    ]
    api.on("GET", "/v1/jobs/j1/metrics", reply(200, {"items": points, "next_after": 2}))
    result = launchbay(api, "metrics", "j1", "--format", "csv")
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [(r["name"], float(r["value"])) for r in rows] == [("loss", 0.5), ("accuracy", 0.8)]


def test_metrics_table_has_a_column_per_metric(api: FakeApi) -> None:
    points = [
        {"seq": 1, "step": 7, "epoch": 0, "name": "loss", "value": 0.5, "ts": 1.0, "attempt": 1},
        {
            "seq": 2,
            "step": 7,
            "epoch": 0,
            "name": "accuracy",
            "value": 0.8,
            "ts": 1.0,
            "attempt": 1,
        },
    ]
    api.on("GET", "/v1/jobs/j1/metrics", reply(200, {"items": points, "next_after": 2}))
    table = launchbay(api, "metrics", "j1").stdout
    header = next(line for line in table.splitlines() if "loss" in line)
    assert header.index("step") < header.index("loss") < header.index("accuracy")
    assert "attempt" not in header


def test_metrics_of_two_attempts_at_one_step_are_rows_of_their_own(api: FakeApi) -> None:
    points = [
        {"seq": 1, "step": 7, "epoch": 0, "name": "loss", "value": 0.5, "ts": 1.0, "attempt": 1},
        {"seq": 9, "step": 7, "epoch": 0, "name": "loss", "value": 0.25, "ts": 2.0, "attempt": 2},
    ]
    api.on("GET", "/v1/jobs/j1/metrics", reply(200, {"items": points, "next_after": 9}))
    rows = [line.split() for line in launchbay(api, "metrics", "j1").stdout.splitlines()]
    assert ["attempt", "step", "epoch", "loss"] in rows
    assert ["1", "7", "0", "0.5"] in rows and ["2", "7", "0", "0.25"] in rows
    csv_rows = launchbay(api, "metrics", "j1", "--format", "csv").stdout.splitlines()
    assert csv_rows[0] == "seq,step,epoch,name,value,ts,attempt"
    assert csv_rows[1:] == ["1,7,0,loss,0.5,1.0,1", "9,7,0,loss,0.25,2.0,2"]


def test_download_saves_the_file(api: FakeApi, tmp_path: Path) -> None:
    api.on("GET", DOWNLOAD_URL, FileServer(cut_at=1000))
    result = launchbay(api, "download", "j1", "-o", str(tmp_path / "m.pt"))
    assert result.exit_code == 0, result.output
    assert f"saved {tmp_path / 'm.pt'}" in result.stdout
    assert (tmp_path / "m.pt").stat().st_size == 1024 * 1024


def test_cancel_prints_the_new_state(api: FakeApi) -> None:
    api.on("POST", "/v1/jobs/j1/cancel", reply(202, job(state="cancelling")))
    result = launchbay(api, "cancel", "j1")
    assert result.exit_code == 0
    assert result.stdout.strip() == "job j1: cancelling"


def test_token_create_prints_the_secret_on_stdout(api: FakeApi) -> None:
    api.on("POST", "/v1/tokens", reply(201, {"name": "ci", "role": "admin", "token": "lb_xyz"}))
    result = launchbay(api, "token", "create", "--name", "ci", "--role", "admin")
    assert result.exit_code == 0
    assert result.stdout.strip() == "lb_xyz"
    assert json.loads(api.requests[0].content) == {"name": "ci", "role": "admin"}


def test_forbidden_mentions_the_admin_role(api: FakeApi) -> None:
    api.on("GET", "/v1/tokens", error_body(403, "forbidden", "admin only"))
    result = launchbay(api, "token", "list")
    assert result.exit_code == 1
    assert "admin" in result.stderr


def test_recipes_and_workers_tables(api: FakeApi) -> None:
    recipe = {"name": "synthetic", "description": "fast regression", "config_schema": {}}
    api.on("GET", "/v1/recipes", reply(200, {"items": [recipe]}))
    api.on("GET", "/v1/workers", reply(200, {"items": [worker_record()]}))
    assert "fast regression" in launchbay(api, "recipes").stdout
    assert "w1" in launchbay(api, "workers").stdout


def test_code_upload(api: FakeApi, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    api.on("POST", "/v1/code", reply(201, {"code_id": "c9", "sha256": "ab", "size": 9}))
    result = launchbay(api, "code", "upload", str(tmp_path / "train.py"), "--json")
    assert json.loads(result.stdout)["code_id"] == "c9"


def test_worker_command_calls_run_worker_lazily(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    fake = types.ModuleType("worker.rq_worker")
    fake.run_worker = lambda **kwargs: calls.append(kwargs)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "worker.rq_worker", fake)
    result = launchbay(api, "worker", "--queue", "gpu", "--queue", "cpu", "--burst", "--gpus", "1")
    assert result.exit_code == 0, result.output
    assert calls == [
        {"queues": ["gpu", "cpu"], "burst": True, "gpus": ("1",), "cpu_slots": None, "pool": None}
    ]
    assert launchbay(api, "worker", "--gpus", " 2, 3").exit_code == 0
    assert calls[-1] == {
        "queues": ["default"],
        "burst": False,
        "gpus": ("2", "3"),
        "cpu_slots": None,
        "pool": None,
    }
    assert launchbay(api, "worker", "--slots", "3", "--pool", "p").exit_code == 0
    assert calls[-1] == {
        "queues": ["default"],
        "burst": False,
        "gpus": None,
        "cpu_slots": 3,
        "pool": "p",
    }


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--gpus", "0,,1"], "empty device id"),
        (["--gpus", "0,1,0"], "names device 0 more than once"),
        (["--gpus", ""], "at least one CUDA device id"),
        (["--gpus", "0", "--slots", "2"], "not both"),
        (["--slots", "0"], "--slots"),
    ],
)
def test_worker_command_refuses_bad_devices(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch, args: list[str], problem: str
) -> None:
    calls: list[dict[str, Any]] = []
    fake = types.ModuleType("worker.rq_worker")
    fake.run_worker = lambda **kwargs: calls.append(kwargs)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "worker.rq_worker", fake)
    result = launchbay(api, "worker", *args)
    assert result.exit_code == 2
    assert problem in " ".join(result.output.split())
    assert calls == []


def test_worker_command_exits_1_when_its_gpus_are_taken(
    api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.devices import DevicesTaken

    def taken(**kwargs: Any) -> None:
        raise DevicesTaken("GPUs already owned on host box: 1 by worker box:7")

    fake = types.ModuleType("worker.rq_worker")
    fake.run_worker = taken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "worker.rq_worker", fake)
    result = launchbay(api, "worker", "--gpus", "1")
    assert result.exit_code == 1
    assert "error: GPUs already owned on host box: 1 by worker box:7" in result.stderr


def test_client_commands_never_import_the_server_side() -> None:
    code = (
        "import sys, client.cli; "
        "print([m for m in sys.modules if m.split('.')[0] in ('service', 'worker', 'torch')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_list_says_when_the_total_is_an_estimate(api: FakeApi) -> None:
    page = {"items": [job()], "total": 1000, "total_is_estimate": True}
    api.on("GET", "/v1/jobs", reply(200, page))
    result = launchbay(api, "list")
    assert result.exit_code == 0, result.output
    assert "1 of 1000+ jobs" in result.stdout
