"""At submission, the live workers of the job's queue (their records in a real Redis, no
worker process): a job none of them could ever run is refused at once (422 `never_fits`),
one that only some could run is accepted with a warning, and with no live worker, or a Redis
whose records are damaged, nothing is refused that was accepted before."""

from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis

from service.models import utcnow
from service.schemas import WorkerRecord
from service.settings import Settings
from service.worker_records import NAMES_KEY, save_worker, worker_key
from tests.integration.test_api_jobs import assert_error_body

JOB = {"name": "fit", "recipe": "synthetic", "device": "cpu", "nproc_per_node": 1}


def live_worker(redis: Redis, name: str, devices: list[str], queues: tuple[str, ...]) -> None:
    now = utcnow()
    record = WorkerRecord(
        name=name,
        host="box",
        pid=1,
        queues=list(queues),
        devices=devices,
        state="idle",
        started_at=now,
        last_heartbeat=now,
        current_job=None,
    )
    save_worker(redis, record, ttl_s=60)


def submitted(api: TestClient, **spec: Any) -> dict[str, Any]:
    response = api.post("/v1/jobs", json={**JOB, **spec})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def test_a_job_no_live_worker_of_its_queue_could_run_is_refused_at_once(
    api: TestClient, settings: Settings
) -> None:
    redis = Redis.from_url(settings.redis_url)
    # No live worker on the queue: accepted as before, nothing said (one may come).
    assert submitted(api, nproc_per_node=3)["warnings"] == []
    assert submitted(api, device="cuda")["warnings"] == []

    live_worker(redis, "cpu-pair", ["cpu:0", "cpu:1"], ("default",))
    live_worker(redis, "gpus-elsewhere", ["0", "1", "2", "3"], ("gpu",))
    too_wide = api.post("/v1/jobs", json={**JOB, "nproc_per_node": 3})
    error = assert_error_body(too_wide, 422, "never_fits")
    assert "cpu-pair (2 CPU slot(s) for nproc_per_node: 3)" in error["message"]
    assert error["detail"]["workers"] == [
        {"name": "cpu-pair", "devices": 2, "why": "2 CPU slot(s) for nproc_per_node: 3"}
    ]
    no_gpu = api.post("/v1/jobs", json={**JOB, "device": "cuda", "backend": "nccl"})
    assert (
        "cpu-pair (no GPU (device: cuda))"
        in assert_error_body(no_gpu, 422, "never_fits")["message"]
    )
    nccl_on_cpu = api.post("/v1/jobs", json={**JOB, "device": "auto", "backend": "nccl"})
    assert_error_body(nccl_on_cpu, 422, "never_fits")
    # What the worker can run, and the other queue's GPU worker, are untouched.
    assert submitted(api, nproc_per_node=2)["warnings"] == []
    assert submitted(api, queue="gpu", device="cuda", nproc_per_node=4)["warnings"] == []
    # A refused job was not stored: only the accepted ones are listed.
    assert api.get("/v1/jobs").json()["total"] == 4


def test_a_job_some_live_workers_could_not_run_is_accepted_with_a_warning(
    api: TestClient, settings: Settings
) -> None:
    redis = Redis.from_url(settings.redis_url)
    live_worker(redis, "cpu-pair", ["cpu:0", "cpu:1"], ("default",))
    live_worker(redis, "gpu-four", ["0", "1", "2", "3"], ("default",))
    job = submitted(api, device="cuda", nproc_per_node=3)
    assert job["warnings"] == [
        "some live workers of queue 'default' could never run this job: cpu-pair (no GPU "
        "(device: cuda)); one of them may take it and fail it with launch_error"
    ]
    # The warning is the job's: it is read back with it.
    assert api.get(f"/v1/jobs/{job['id']}").json()["warnings"] == job["warnings"]
    assert submitted(api, device="auto", nproc_per_node=2)["warnings"] == []


def save_damaged(redis: Redis, raw: bytes) -> None:
    """A record no worker would write, where workers save theirs."""
    redis.set(worker_key("damaged"), raw, ex=60)
    redis.sadd(NAMES_KEY, "damaged")


@pytest.mark.parametrize(
    "damaged",
    [
        b"not json {",
        b"[1, 2, 3]",
        b'"a string"',
        b'{"name": "half", "queues": ["default"], "devices": "all of them"}',
        b'{"name": "x", "queues": "default"}',
        b"\xff\xfe\x00",
    ],
)
def test_damaged_worker_records_never_make_a_submission_fail(
    api: TestClient, settings: Settings, damaged: bytes
) -> None:
    """Records are written by workers: one that cannot be read may be a worker of the queue
    that could run the job, so the job is accepted, with a warning, not refused."""
    redis = Redis.from_url(settings.redis_url)
    save_damaged(redis, damaged)
    assert submitted(api, nproc_per_node=3)["warnings"] == []  # no readable worker: as before
    live_worker(redis, "cpu-pair", ["cpu:0", "cpu:1"], ("default",))
    job = submitted(api, nproc_per_node=3)
    assert len(job["warnings"]) == 1
    assert job["warnings"][0].startswith(
        "no live worker of queue 'default' is known to be able to run this job: cpu-pair (2 CPU "
        "slot(s) for nproc_per_node: 3), and 1 worker record(s) could not be read"
    )
    # A damaged record that says it serves other queues only is no worker of this one.
    save_damaged(redis, b'{"name": "y", "queues": ["other"], "pid": "x"}')
    assert_error_body(api.post("/v1/jobs", json={**JOB, "nproc_per_node": 3}), 422, "never_fits")


def test_hostile_worker_records_keep_the_answer_bounded(
    api: TestClient, settings: Settings
) -> None:
    redis = Redis.from_url(settings.redis_url)
    for n in range(40):
        live_worker(redis, f"w{n:02d}-" + "x" * 5000, ["cpu:0"], ("default",))
    refused = assert_error_body(api.post("/v1/jobs", json={**JOB, "nproc_per_node": 2}), 422)
    assert len(refused["message"]) < 1000
    assert len(refused["detail"]["workers"]) == 5 and refused["detail"]["live_workers"] == 40
    assert refused["message"].endswith(
        "and 35 more; change the spec, or submit it to a queue whose workers can"
    )
