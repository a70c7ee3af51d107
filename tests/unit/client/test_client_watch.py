"""The live job view behind `launchbay watch`, on a terminal."""

import io

from rich.console import Console

from client import Client
from client.models import Event
from client.watch import JobView, follow_job
from tests.unit.client.conftest import FakeApi, job, reply
from tests.unit.client.test_client_sse import EVENTS, sse


def test_live_display_on_a_terminal(api: FakeApi, lb: Client) -> None:
    final = job(state="succeeded", exit_reason="completed")
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="queued")), reply(200, final))
    stream = sse(
        (1, "state", {"state": "running"}),
        (2, "metric", {"step": 60, "epoch": 1, "name": "accuracy", "value": 0.875}),
        (3, "log", {"seq": 3, "rank": 0, "line": "[not markup] epoch 1"}),
        (4, "state", {"state": "succeeded", "exit_reason": "completed"}),
    )
    api.on("GET", EVENTS, reply(200, content=stream))
    api.on("GET", "/v1/jobs/j1/logs", reply(200, {"items": [], "next_after": 0}))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    assert follow_job(lb, "j1", console).state == "succeeded"
    shown = out.getvalue()
    for text in ("job j1", "succeeded", "[rank 0] [not markup] epoch 1", "loss 0.5"):
        assert text in shown


def test_progress_counts_steps_when_total_steps_is_known() -> None:
    view = JobView(job(progress={"step": 0, "epoch": 0, "total_steps": 200}))
    view.apply(
        Event(id="5", event="metric", data={"step": 50, "epoch": 0, "name": "loss", "value": 0.1})
    )
    (task,) = view.progress.tasks
    assert (task.description, task.completed, task.total) == ("step", 50, 200)
    assert view.job["latest_metrics"]["loss"] == 0.1
    assert view.last_seq == 5


def test_progress_falls_back_to_epochs() -> None:
    view = JobView(job(progress={"step": 30, "epoch": 1, "total_steps": None}))
    (task,) = view.progress.tasks
    assert (task.description, task.completed, task.total) == ("epoch", 1, 2)


def test_the_time_left_is_the_api_s_counted_down_while_running() -> None:
    view = JobView(job(progress={"step": 10, "epoch": 0, "total_steps": 100, "eta_s": 3725.0}))
    assert view.eta is not None
    read_at = view.eta[1]
    assert view.time_left(now=read_at) == "time left 1h02m"
    assert view.time_left(now=read_at + 3700) == "time left 25s"
    assert view.time_left(now=read_at + 9999) == "time left 0s"
    view.replace_job(job(state="succeeded", progress={"step": 100, "eta_s": None}))
    assert view.time_left() == ""
    stopping = JobView(job(state="cancelling", progress={"step": 1, "eta_s": 5.0}))
    assert stopping.time_left() == ""


def test_system_metrics_are_not_the_job_s_values() -> None:
    view = JobView(job())
    point = {"step": None, "name": "system/gpu0/utilization_percent", "value": 97.0}
    view.apply(Event(id="7", event="metric", data=point))
    assert "system/gpu0/utilization_percent" not in view.job["latest_metrics"]
