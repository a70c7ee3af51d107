"""`launchbay runs` (not `launchbay run`) and `Client.list_runs` against a real API over HTTP:
one row per job with the spec fields that differ and each metric's last and best values."""

import json
import time

import pytest
from typer.testing import CliRunner, Result

from client.cli import CliState, app
from service import records
from tests.integration.client.conftest import ADMIN_TOKEN, LiveApi


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LAUNCHBAY_API_URL", "LAUNCHBAY_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def launchbay(url: str, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), obj=CliState(api_url=url, token=ADMIN_TOKEN))


def test_runs_table_sorted_by_best_loss(live_api: LiveApi) -> None:
    ids = []
    with live_api.client() as lb:
        for lr, losses in ((0.1, [0.9, 0.2, 0.4]), (0.3, [0.8, 0.5])):
            spec = {"name": f"lr-{lr}", "recipe": "synthetic", "config": {"lr": lr}}
            ids.append(lb.submit_job({**spec, "tags": {"sweep": "lr"}}).id)
            live_api.start(ids[-1])
            with live_api.worker_session() as session:
                points = [
                    records.NewMetricPoint(step, 0, "loss", loss, time.time())
                    for step, loss in enumerate(losses, 1)
                ]
                records.append_metric_points(session, ids[-1], 1, points)
        page = lb.list_runs(tag="sweep=lr")
    assert [run.job.id for run in page.items] == ids[::-1]
    assert page.items[1].metrics["loss"].best == 0.2 and page.items[1].metrics["loss"].last == 0.4

    result = launchbay(live_api.url, "runs", "--tag", "sweep=lr", "--sort", "best:loss")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = lines[0].split()
    assert header == ["name", "id", "state", "config.lr", "last:loss", "best:loss"], header
    rows = [line.split() for line in lines[1:] if line.strip() and not set(line) <= set("─ ")]
    assert [row[0] for row in rows] == ["lr-0.1", "lr-0.3"]  # best loss 0.2, then 0.5
    assert rows[0][3:] == ["0.1", "0.4", "0.2"], rows

    listed = json.loads(launchbay(live_api.url, "runs", "--json", "-m", "loss").stdout)
    assert listed["total"] == 2
    refused = launchbay(live_api.url, "runs", "--sort", "best:nothing")
    assert refused.exit_code == 2 and "no column 'best:nothing'" in refused.output
