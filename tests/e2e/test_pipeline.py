"""POST a job over HTTP; a real worker runs it with real torchrun (gloo, CPU).

The demo job runs on PostgreSQL, the others on SQLite: two stacks the module's tests share
(each test's jobs its own), and one of its own for the test that restarts the API."""

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import torch

from jobs.recipes.digits import DigitsNet
from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack

DEMO = {
    "name": "digits-ddp",
    "recipe": "digits",
    "nproc_per_node": 2,
    "config": {"epochs": 4},
    "checkpoint": {"best_metric": "accuracy", "best_mode": "max"},
}


def follow_events(
    http: httpx.Client,
    job_id: str,
    last_event_id: str | None = None,
    stop_after: int | None = None,
) -> list[dict[str, Any]]:
    """Read the job's SSE stream until it ends (or `stop_after` events) as dicts."""
    events: list[dict[str, Any]] = []
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    current: dict[str, Any] = {}
    with http.stream(
        "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=httpx.Timeout(30, read=120)
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line:
                if "id" in current:
                    current["data"] = json.loads(current["data"])
                    events.append(current)
                    if stop_after is not None and len(events) >= stop_after:
                        return events
                current = {}
            elif not line.startswith(":"):
                field, _, value = line.partition(":")
                current[field] = value.removeprefix(" ")
    return events


def test_demo_job_runs_to_success_over_http(shared_postgres_stack: Stack, tmp_path: Path) -> None:
    stack = shared_postgres_stack
    with stack.client() as http:
        response = http.post("/v1/jobs", json=DEMO)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        events = follow_events(http, job_id)
        states = [e["data"]["state"] for e in events if e["event"] == "state"]
        assert states == ["queued", "starting", "running", "succeeded"], states
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert job["exit_code"] == 0 and job["exit_reason"] == "completed"
        assert job["started_at"] and job["finished_at"] and job["worker"]
        assert job["latest_metrics"]["accuracy"] >= 0.9

        for rank in (0, 1):
            lines = http.get(f"/v1/jobs/{job_id}/logs", params={"rank": rank}).json()["items"]
            assert lines, f"rank {rank} has logs"
            assert all(line["rank"] == rank for line in lines)

        # Metrics arrive once each: as many points as rank 0 reported, seq strictly rising.
        events_file = stack.data_dir / "runs" / job_id / "attempt-1" / "events.jsonl"
        reported = [json.loads(line) for line in events_file.read_text().splitlines()]
        expected = sum(len(r["metrics"]) for r in reported if r["type"] == "metric")
        points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
        assert len(points) == expected > 0
        seqs = [p["seq"] for p in points]
        assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False))

        # The best checkpoint downloads, matches its ETag and loads into a plain model.
        checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        assert checkpoints
        download = http.get(f"/v1/jobs/{job_id}/checkpoints/best/download")
        assert download.status_code == 200
        digest = hashlib.sha256(download.content).hexdigest()
        assert download.headers["etag"].strip('"') == digest
        assert digest in {c["sha256"] for c in checkpoints}
        path = tmp_path / "best.pt"
        path.write_bytes(download.content)
        state = torch.load(path, map_location="cpu", weights_only=False)
        DigitsNet(DEMO["config"].get("channels", 16)).load_state_dict(state["model"], strict=True)
    assert job_processes(job_id) == []


def test_a_rank_that_raises_fails_the_job_naming_it(shared_sqlite_stack: Stack) -> None:
    stack = shared_sqlite_stack
    spec = {
        "name": "breaks",
        "recipe": "synthetic",
        "nproc_per_node": 2,
        "config": {"fail_on_rank": 1},
    }
    with stack.client() as http:
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
        job = stack.wait_for_state(http, job_id, {"failed"})
    assert job["exit_reason"] == "user_error"
    assert job["exit_code"] not in (0, None)
    assert "rank 1" in job["message"]
    assert "synthetic failure on rank 1" in job["message"]
    assert wait_until(lambda: job_processes(job_id) == [], timeout=5)


def test_metrics_are_visible_while_the_job_runs(shared_sqlite_stack: Stack) -> None:
    spec = {
        "name": "slow",
        "recipe": "synthetic",
        "nproc_per_node": 2,
        "config": {"epochs": 3, "sleep_per_step_s": 0.1, "log_every_steps": 1},
    }
    with shared_sqlite_stack.client() as http:
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
        shared_sqlite_stack.wait_for_state(http, job_id, {"running"})

        def seen_while_running() -> bool:
            points = http.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
            return bool(points) and http.get(f"/v1/jobs/{job_id}").json()["state"] == "running"

        assert wait_until(seen_while_running, timeout=60, interval=0.2)
        shared_sqlite_stack.wait_for_state(http, job_id, {"succeeded"})


def test_a_reconnecting_stream_misses_and_repeats_nothing(shared_sqlite_stack: Stack) -> None:
    spec = {
        "name": "streamed",
        "recipe": "synthetic",
        "nproc_per_node": 2,
        "config": {"epochs": 2, "sleep_per_step_s": 0.05, "log_every_steps": 1},
    }
    with shared_sqlite_stack.client() as http:
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
        unbroken: list[dict[str, Any]] = []
        reader = threading.Thread(target=lambda: unbroken.extend(follow_events(http, job_id)))
        reader.start()
        pieces: list[dict[str, Any]] = []
        last_id = None
        while (
            not pieces
            or pieces[-1]["event"] != "state"
            or pieces[-1]["data"]["state"] not in ("succeeded", "failed", "cancelled")
        ):
            pieces += follow_events(http, job_id, last_event_id=last_id, stop_after=15)
            last_id = pieces[-1]["id"]
        reader.join(timeout=120)
    assert pieces[-1]["data"]["state"] == "succeeded"
    assert [e["id"] for e in pieces] == [e["id"] for e in unbroken]
    assert [e["data"] for e in pieces] == [e["data"] for e in unbroken]


def test_a_replay_after_the_end_is_the_history_a_live_client_saw(
    shared_sqlite_stack: Stack,
) -> None:
    """Retention deletes checkpoints while the job runs: their `checkpoint` events stay in the
    history, each deletion an event of its own."""
    spec = {
        "name": "retained",
        "recipe": "synthetic",
        "nproc_per_node": 2,
        "config": {"epochs": 4},
        "checkpoint": {"every_epochs": 1, "keep_last": 1},
    }
    with shared_sqlite_stack.client() as http:
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
        live = follow_events(http, job_id)
        replayed = follow_events(http, job_id, last_event_id="0")
        kept = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    assert live[-1]["data"]["state"] == "succeeded"
    assert [e["id"] for e in replayed] == [e["id"] for e in live]
    assert [e["data"] for e in replayed] == [e["data"] for e in live]
    saved = [e["data"]["id"] for e in live if e["event"] == "checkpoint"]
    deleted = [e["data"]["id"] for e in live if e["event"] == "checkpoint_deleted"]
    assert len(saved) == 4 and deleted == saved[:3]
    assert [c["id"] for c in kept] == saved[3:]


def test_jobs_and_logs_survive_an_api_restart(sqlite_stack: Stack) -> None:
    spec = {"name": "durable", "recipe": "synthetic", "nproc_per_node": 2}
    with sqlite_stack.client() as http:
        job_id = http.post("/v1/jobs", json=spec).json()["id"]
        before = sqlite_stack.wait_for_state(http, job_id, {"succeeded"})
        logs_before = http.get(f"/v1/jobs/{job_id}/logs").json()
    sqlite_stack.stop_api()
    sqlite_stack.start_api()
    with sqlite_stack.client() as http:
        assert http.get(f"/v1/jobs/{job_id}").json() == before
        assert http.get(f"/v1/jobs/{job_id}/logs").json() == logs_before
        assert logs_before["items"]
