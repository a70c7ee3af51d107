"""The `launchbay` CLI against a real API over HTTP: output and exit status."""

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from client.cli import CliState, app
from client.sdk import Client
from jobs.states import ExitReason, JobState
from service import records
from tests.integration.client.conftest import ADMIN_TOKEN, LiveApi, StreamOpened, once
from tests.support.procs import free_port

SPEC = {"name": "it-cli", "recipe": "synthetic"}


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAUNCHBAY_API_URL", "LAUNCHBAY_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def launchbay(
    url: str, *args: str, token: str | None = ADMIN_TOKEN, transport: StreamOpened | None = None
) -> Result:
    state = CliState(api_url=url, token=token, transport=transport)
    return CliRunner().invoke(app, list(args), obj=state)


def submitted(live_api: LiveApi) -> str:
    with live_api.client() as lb:
        return lb.submit_job(SPEC).id


def test_submit_list_status_cancel(live_api: LiveApi, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: it-cli\nrecipe: synthetic\n")
    result = launchbay(live_api.url, "submit", str(spec), "--set", "max_retries=2", "--json")
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert job["spec"]["max_retries"] == 2

    listed = json.loads(launchbay(live_api.url, "list", "--json").stdout)
    assert [j["id"] for j in listed["items"]] == [job["id"]]
    assert job["id"] in launchbay(live_api.url, "list").stdout

    status = launchbay(live_api.url, "status", job["id"], "--json")
    assert json.loads(status.stdout)["state"] == "queued"

    cancelled = launchbay(live_api.url, "cancel", job["id"])
    assert cancelled.stdout.strip() == f"job {job['id']}: cancelled"
    watched = launchbay(live_api.url, "watch", job["id"])
    assert watched.exit_code == 2
    assert f"job {job['id']} cancelled (cancelled)" in watched.stdout


def test_watch_follows_a_running_job_to_success(live_api: LiveApi) -> None:
    job_id = submitted(live_api)
    live_api.start(job_id)

    def worker() -> None:
        with live_api.worker_session() as session:
            records.append_log_lines(
                session, job_id, 1, [records.NewLogLine(1, time.time(), "training")]
            )
        live_api.finish(job_id, JobState.SUCCEEDED, exit_code=0, exit_reason=ExitReason.COMPLETED)

    transport = StreamOpened()
    finishing = once(transport.opened, worker)
    result = launchbay(live_api.url, "watch", job_id, transport=transport)
    finishing.join()
    assert result.exit_code == 0, result.output
    assert "[rank 1] training" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == f"job {job_id} succeeded (completed)"


def test_watch_of_a_failed_job_exits_1(live_api: LiveApi) -> None:
    job_id = submitted(live_api)
    live_api.start(job_id)
    live_api.finish(job_id, JobState.FAILED, exit_code=1, exit_reason=ExitReason.USER_ERROR)
    result = launchbay(live_api.url, "watch", job_id)
    assert result.exit_code == 1
    assert f"job {job_id} failed (user_error)" in result.stdout


def test_logs_metrics_and_download(live_api: LiveApi, tmp_path: Path) -> None:
    job_id = submitted(live_api)
    live_api.start(job_id)
    with live_api.worker_session() as session:
        records.append_log_lines(
            session, job_id, 1, [records.NewLogLine(0, time.time(), "epoch 0")]
        )
        point = records.NewMetricPoint(3, 0, "loss", 0.25, time.time())
        records.append_metric_points(session, job_id, 1, [point])
    live_api.add_checkpoint(job_id, b"weights" * 1000)

    assert launchbay(live_api.url, "logs", job_id).stdout == "[rank 0] epoch 0\n"
    metrics = json.loads(launchbay(live_api.url, "metrics", job_id, "--format", "json").stdout)
    assert [(m["step"], m["name"], m["value"]) for m in metrics] == [(3, "loss", 0.25)]
    result = launchbay(live_api.url, "download", job_id, "-o", str(tmp_path / "w.pt"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "w.pt").read_bytes() == b"weights" * 1000


def test_errors_exit_with_their_status(live_api: LiveApi, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = launchbay(live_api.url, "status", "nope")
    assert missing.exit_code == 1
    assert missing.stderr.startswith("error not_found: ")

    no_token = launchbay(live_api.url, "list", token=None)
    assert no_token.exit_code == 1
    assert "LAUNCHBAY_TOKEN" in no_token.stderr

    monkeypatch.setattr(Client, "_backoff", lambda self, attempt, server_ms=None: None)
    nobody = f"http://127.0.0.1:{free_port()}"
    unreachable = launchbay(nobody, "list")
    assert unreachable.exit_code == 3
    assert f"cannot reach Launchbay at {nobody}" in unreachable.stderr


def test_delete_code_upload_recipes_and_workers(live_api: LiveApi, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    uploaded = launchbay(live_api.url, "code", "upload", str(script), "--json")
    assert uploaded.exit_code == 0, uploaded.output
    assert len(json.loads(uploaded.stdout)["code_id"]) == 64

    recipes = json.loads(launchbay(live_api.url, "recipes", "--json").stdout)
    assert {r["name"] for r in recipes["items"]} >= {"synthetic", "digits", "text"}
    workers = launchbay(live_api.url, "workers", "--json")
    assert workers.exit_code == 0, workers.output
    assert json.loads(workers.stdout)["items"] == []

    job_id = submitted(live_api)
    refused = launchbay(live_api.url, "delete", job_id)
    assert refused.exit_code == 1
    assert "invalid_transition" in refused.stderr
    launchbay(live_api.url, "cancel", job_id)
    deleted = launchbay(live_api.url, "delete", job_id)
    assert deleted.exit_code == 0, deleted.output
    assert launchbay(live_api.url, "status", job_id).exit_code == 1


def test_server_side_commands_db_upgrade_and_one_reaper_pass(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = tmp_path / "fresh" / "launchbay.db"
    monkeypatch.setenv("LAUNCHBAY_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv("LAUNCHBAY_DATA_DIR", str(tmp_path / "fresh"))
    monkeypatch.setenv("LAUNCHBAY_REDIS_URL", redis_url)
    from service.settings import get_settings

    get_settings.cache_clear()
    try:
        upgraded = CliRunner().invoke(app, ["db", "upgrade"])
        assert upgraded.exit_code == 0, upgraded.output
        assert database.exists()
        reaped = CliRunner().invoke(app, ["reaper", "--once"])
        assert reaped.exit_code == 0, reaped.output
    finally:
        get_settings.cache_clear()


def test_job_refs_compare_rerun_and_code_list_against_the_api(
    live_api: LiveApi, tmp_path: Path
) -> None:
    """Prefixes, names and name@N reach the job through every command; rerun is validated by
    the API (a did-you-mean for a misspelt field); compare and code list read at 80 columns."""
    with live_api.client() as lb:
        first = lb.submit_job({**SPEC, "name": "digits-ddp", "config": {"lr": 0.1}}).id
        second = lb.submit_job({**SPEC, "name": "digits-ddp", "config": {"lr": 0.01}}).id
    live_api.start(first)
    live_api.finish(
        first, JobState.FAILED, exit_code=1, exit_reason=ExitReason.USER_ERROR, message="boom"
    )
    status = launchbay(live_api.url, "status", first[:6], "--json")
    assert json.loads(status.stdout)["id"] == first
    assert (
        json.loads(launchbay(live_api.url, "status", "digits-ddp@2", "--json").stdout)["id"]
        == first
    )
    ambiguous = launchbay(live_api.url, "status", "digits-ddp")
    assert ambiguous.exit_code == 1
    assert ambiguous.stderr.startswith("error ambiguous_id: ")
    assert {line.split()[0] for line in ambiguous.stderr.splitlines()[1:]} == {first, second}

    listed = launchbay(live_api.url, "list", "--name", "DIGITS")
    lines = listed.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith(first))
    assert lines[row + 1] == "  user_error: boom"
    compared = launchbay(live_api.url, "compare", "digits-ddp@1", first[:4])
    assert compared.exit_code == 0, compared.output
    assert ["config.lr", "0.01", "0.1"] in [line.split() for line in compared.stdout.splitlines()]

    misspelt = launchbay(live_api.url, "rerun", first[:6], "--set", "nproc_per_nodes=2")
    assert misspelt.exit_code == 1
    assert "did you mean nproc_per_node?" in misspelt.stderr
    rerun = launchbay(live_api.url, "rerun", first[:6], "--set", "config.lr=0.5", "--json")
    assert rerun.exit_code == 0, rerun.output
    again = json.loads(rerun.stdout)
    assert again["spec"]["config"]["lr"] == 0.5 and again["name"] == "digits-ddp"
    newest = json.loads(launchbay(live_api.url, "status", "digits-ddp@1", "--json").stdout)
    assert newest["id"] == again["id"]

    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    code_id = json.loads(launchbay(live_api.url, "code", "upload", str(script), "--json").stdout)[
        "code_id"
    ]
    code_list = launchbay(live_api.url, "code", "list")
    assert code_list.stdout.splitlines()[1].split()[:2] == [code_id[:12], "train.py"]
    removed = launchbay(live_api.url, "code", "rm", code_id[:8])
    assert removed.exit_code == 0, removed.output
    assert json.loads(launchbay(live_api.url, "code", "list", "--json").stdout) == {"items": []}
