"""A job's system metrics, idle-GPU verdicts and ETA in a real database (SQLite and
PostgreSQL), written as the worker writes them (its GPU watch, its ingestor), read back over
HTTP; the idle-GPU policy set and refused over HTTP.

No GPU here, so the GPU watch reads through a stand-in for the GPUs behind its reader
interface (`worker.gpu_sampler.GpuReader`, the one seam): everything from there on is real.
"""

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from jobs.spec import JobSpec
from jobs.states import AttemptRef, ExitReason, JobState
from service import records
from service.db import session_scope
from service.scheduling.idle_gpu import idle_gpu_policy_of
from tests.integration.test_api_jobs import assert_error_body
from worker import gpu_watch
from worker.attempt_end import record_outcome
from worker.gpu_sampler import GpuSample
from worker.gpu_watch import GpuWatch
from worker.ingest import Ingestor
from worker.launch import LaunchPlan
from worker.stops import StopOutcomes, StopReason

UTIL = "system/gpu{}/utilization_percent"


class ScriptedGpus:
    """Each read gives the next utilisations of the job's GPUs (the last one again at the end)."""

    name = "scripted"

    def __init__(self, *readings: tuple[float, ...]) -> None:
        self.readings = list(readings)
        self.closed = False

    def read(self) -> list[GpuSample]:
        now = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        return [GpuSample(i, u, 2e9 + i, 300.0) for i, u in enumerate(now)]

    def close(self) -> None:
        self.closed = True


def running_job(engine: Engine, owner: str = "", **spec: Any) -> str:
    with session_scope(engine) as session:
        job_id = records.create_job(
            session, JobSpec(name="g", recipe="synthetic", **spec), owner=owner
        ).id
    with session_scope(engine) as session:
        assert records.take_job(session, job_id, 1) is not None
    with session_scope(engine) as session:
        assert records.transition_job(session, job_id, JobState.RUNNING, attempt=1)
    return job_id


def ingest(engine: Engine, tmp_path: Path, job_id: str, *lines: dict[str, Any]) -> Ingestor:
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    ingestor = Ingestor(
        engine,
        AttemptRef(job_id, 1),
        log_dir=tmp_path / "logs",
        events_file=events,
        max_line_bytes=10_000,
        on_checkpoint=lambda _: None,
    )
    assert ingestor.poll(final=True)
    return ingestor


def test_gpu_readings_are_system_metrics_apart_from_the_program_s(
    engine: Engine, api: TestClient, tmp_path: Path
) -> None:
    job_id = running_job(engine)
    reader = ScriptedGpus((93.0, 88.5))
    watch = GpuWatch(engine, AttemptRef(job_id, 1), reader, interval_s=10, policy=None)
    assert watch.sample() and watch.sample()
    # The program reports its own, and tries to forge a GPU reading: that line is refused.
    forged = {"system/gpu0/utilization_percent": 0.0, "loss": 9.0}
    ingestor = ingest(
        engine,
        tmp_path,
        job_id,
        {"type": "metric", "step": 1, "metrics": {"loss": 0.5}},
        {"type": "metric", "step": 2, "metrics": forged},
    )
    assert ingestor.invalid_events == 1
    assert "Launchbay's own system metrics" in ingestor.invalid_reasons[0]

    points = api.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 1000}).json()["items"]
    readings = [p for p in points if p["name"] == UTIL.format(0)]
    assert [p["value"] for p in readings] == [93.0, 93.0]  # the forged 0.0 is not among them
    assert all(p["step"] is None and p["ts"] > 0 for p in readings)
    names = {p["name"] for p in points}
    assert names == {
        "loss",
        *(
            f"system/gpu{i}/{q}"
            for i in (0, 1)
            for q in ("utilization_percent", "memory_used_bytes", "power_watts")
        ),
    }
    one = api.get(f"/v1/jobs/{job_id}/metrics", params={"name": UTIL.format(1)}).json()["items"]
    assert [p["value"] for p in one] == [88.5, 88.5]
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["latest_metrics"] == {"loss": 0.5}  # the program's own only
    assert job["progress"]["step"] == 1
    charted = api.get(f"/v1/jobs/{job_id}/metrics", params={"max_points": 10}).json()["items"]
    assert {p["name"] for p in charted} == names  # the dashboard's charts read them too


def test_an_attempt_s_watch_reads_its_gpus_from_the_start_with_its_owner_s_policy(
    engine: Engine, api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = {"below_percent": 50, "for_s": 0.01, "action": "stop"}
    assert api.put("/v1/policies/carol", json={"idle_gpu": stop}).status_code == 200
    job_id = running_job(engine, owner="carol")
    opened: list[list[str]] = []

    def scripted(devices: list[str]) -> ScriptedGpus:
        opened.append(devices)
        return reader

    reader = ScriptedGpus((1.0, 2.0))
    monkeypatch.setattr(gpu_watch, "open_gpu_reader", scripted)
    cpu_plan = LaunchPlan([], {"CUDA_VISIBLE_DEVICES": "0,1"}, Path("."), cuda_available=False)
    ref = AttemptRef(job_id, 1)
    assert gpu_watch.gpu_watch_for(engine, ref, cpu_plan, "carol", 0.01) is None
    plan = LaunchPlan([], {"CUDA_VISIBLE_DEVICES": "0,1"}, Path("."), cuda_available=True)
    watch = gpu_watch.gpu_watch_for(engine, ref, plan, "carol", 0.01)
    assert watch is not None and opened == [["0", "1"]]
    try:
        deadline = time.monotonic() + 20
        while watch.stop_message is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        watch.stop()
    assert watch.samples >= 2 and reader.closed
    assert watch.stop_message is not None and "2 GPU(s) stayed below 50%" in watch.stop_message
    timeline = api.get(f"/v1/jobs/{job_id}/timeline").json()["items"]
    assert [i["data"]["action"] for i in timeline if i["event"] == "idle_gpu"] == ["stop"]
    points = api.get(f"/v1/jobs/{job_id}/metrics", params={"name": UTIL.format(1)}).json()
    assert points["items"] and all(p["value"] == 2.0 for p in points["items"])


def test_idle_gpus_warn_once_then_a_stop_policy_ends_the_job_idle_gpu(
    engine: Engine, api: TestClient
) -> None:
    put = api.put("/v1/policies/*", json={"idle_gpu": {"below_percent": 5, "for_s": 0.05}})
    assert put.status_code == 200, put.text
    assert put.json()["idle_gpu"] == {"below_percent": 5.0, "for_s": 0.05, "action": "warn"}
    stop = {"below_percent": 10, "for_s": 0.05, "action": "stop"}
    assert api.put("/v1/policies/bob", json={"idle_gpu": stop}).status_code == 200
    listed = {p["owner"]: p["idle_gpu"] for p in api.get("/v1/policies").json()["items"]}
    assert listed == {"*": put.json()["idle_gpu"], "bob": {**stop, "below_percent": 10.0}}

    alice_job = running_job(engine, owner="alice")
    with engine.connect() as connection:
        policy = idle_gpu_policy_of(connection, "alice")  # everyone's
    assert policy is not None and policy.action == "warn"
    reader = ScriptedGpus((50.0, 1.0), (1.0, 1.0))
    watch = GpuWatch(engine, AttemptRef(alice_job, 1), reader, interval_s=10, policy=policy)
    for _ in range(5):
        watch.sample()
        time.sleep(0.03)
    assert watch.stop_message is None
    job = api.get(f"/v1/jobs/{alice_job}").json()
    assert job["state"] == "running" and len(job["warnings"]) == 1
    assert job["warnings"][0].startswith("idle by the idle-GPU policy: its 2 GPU(s)")
    timeline = api.get(f"/v1/jobs/{alice_job}/timeline").json()["items"]
    idle = [item for item in timeline if item["event"] == "idle_gpu"]
    assert len(idle) == 1 and idle[0]["data"]["action"] == "warn"

    bob_job = running_job(engine, owner="bob", max_retries=3)
    with engine.connect() as connection:
        policy = idle_gpu_policy_of(connection, "bob")  # his own
    assert policy is not None and policy.action == "stop"
    watch = GpuWatch(
        engine, AttemptRef(bob_job, 1), ScriptedGpus((9.0,)), interval_s=10, policy=policy
    )
    watch.sample()
    time.sleep(0.06)
    watch.sample()
    assert watch.stop_message is not None
    # What the supervisor does with it (worker.monitor): the attempt's outcome, recorded.
    outcome = StopOutcomes(
        JobSpec.model_validate(api.get(f"/v1/jobs/{bob_job}").json()["spec"]), "w", None
    )
    ended = outcome.outcome(
        StopReason.IDLE_GPU,
        -15,
        over_disk=None,
        preempted_by=lambda: None,
        idle_gpu=watch.stop_message,
    )
    assert ended is not None
    assert record_outcome(engine, AttemptRef(bob_job, 1), ended).recorded
    job = api.get(f"/v1/jobs/{bob_job}").json()
    assert (job["state"], job["exit_reason"], job["attempt"]) == (
        "failed",
        "idle_gpu",
        1,
    )  # not retried
    assert job["message"].startswith(
        "stopped by the idle-GPU policy: its 1 GPU(s) stayed below 10%"
    )
    assert job["progress"]["eta_s"] is None


def test_the_idle_gpu_policy_refuses_nonsense(api: TestClient) -> None:
    for bad in (
        {"below_percent": 0, "for_s": 60},
        {"below_percent": 250, "for_s": 60},
        {"below_percent": 5, "for_s": -1},
        {"below_percent": 5, "for_s": 1e12},
        {"below_percent": 5, "for_s": 60, "action": "reboot"},
        {"below_percent": 5, "for_s": 60, "extra": True},
        {"below_percent": [5], "for_s": 60},
        {"for_s": 60},
        "stop",
        [],
    ):
        error = assert_error_body(api.put("/v1/policies/alice", json={"idle_gpu": bad}), 422)
        assert error["code"] == "validation_error"
    raw = '{"idle_gpu": {"below_percent": NaN, "for_s": Infinity}}'
    sent = api.put("/v1/policies/alice", content=raw, headers={"Content-Type": "application/json"})
    assert_error_body(sent, 422)
    assert api.get("/v1/policies").json()["items"] == []
    # Cleared by a PUT without it, as every field of the policy.
    assert (
        api.put(
            "/v1/policies/alice", json={"idle_gpu": {"below_percent": 1, "for_s": 9}}
        ).status_code
        == 200
    )
    assert api.put("/v1/policies/alice", json={"weight": 2}).json()["idle_gpu"] is None


def test_a_running_job_s_eta_from_its_recent_steps(
    engine: Engine, api: TestClient, tmp_path: Path
) -> None:
    job_id = running_job(engine, max_retries=1)
    now = time.time()
    lines = [
        {
            "type": "metric",
            "step": s,
            "metrics": {"loss": 1 / s},
            "ts": now - 20 + s,
            "total_steps": 60,
        }
        for s in range(1, 21)
    ]
    ingest(engine, tmp_path, job_id, *lines)
    job = api.get(f"/v1/jobs/{job_id}").json()
    # 40 steps left at 1 step/s, counted down since the last step's time (now).
    assert 38 <= job["progress"]["eta_s"] <= 40, job["progress"]
    assert (job["progress"]["step"], job["progress"]["total_steps"]) == (20, 60)
    listed = api.get("/v1/jobs").json()["items"][0]["progress"]
    assert listed["eta_s"] is not None
    # A retry forgets it: the next attempt's rate is its own.
    with session_scope(engine) as session:
        failed = records.end_attempt(
            session, job_id, 1, JobState.FAILED, exit_reason=ExitReason.HANG
        )
        assert records.commit_end(session, failed).retried is not None
    assert api.get(f"/v1/jobs/{job_id}").json()["progress"]["eta_s"] is None
