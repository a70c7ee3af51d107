"""GET /v1/workers lists what the workers' heartbeats keep in Redis."""

import time

from fastapi.testclient import TestClient
from redis import Redis

from service.schemas import WorkerJob
from service.settings import Settings
from service.worker_records import save_worker
from worker.rq_worker import LaunchbayWorker


def user_headers(api: TestClient, name: str) -> dict[str, str]:
    created = api.post("/v1/tokens", json={"name": name, "role": "user"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


def test_workers_with_their_queues_devices_heartbeat_and_job(
    api: TestClient, settings: Settings
) -> None:
    redis = Redis.from_url(settings.redis_url)
    assert api.get("/v1/workers").json() == {"items": []}
    # Submitted before the workers are live (a live worker of one CPU slot would refuse it).
    mine = api.post("/v1/jobs", json={"name": "x", "recipe": "synthetic"}).json()["id"]
    idle = LaunchbayWorker(["default", "gpu"], connection=redis, name="host:1")
    idle.save_record()
    busy = LaunchbayWorker(["default"], connection=redis, name="host:2")
    busy.devices = ["0", "1"]
    busy.current = WorkerJob(id=mine, attempt=2)
    busy.save_record()

    items = api.get("/v1/workers").json()["items"]
    assert [(w["name"], w["state"], w["queues"], w["devices"]) for w in items] == [
        ("host:1", "idle", ["default", "gpu"], ["cpu:0"]),
        ("host:2", "busy", ["default"], ["0", "1"]),
    ]
    assert items[0]["current_job"] is None
    assert items[1]["current_job"] == {"id": mine, "attempt": 2, "node": None}
    assert items[1]["last_heartbeat"] >= items[1]["started_at"]

    # Another user sees the worker busy, not with whose job.
    others = api.get("/v1/workers", headers=user_headers(api, "alice")).json()["items"]
    assert [(w["state"], w["current_job"]) for w in others] == [("idle", None), ("busy", None)]

    # A heartbeat that is not renewed expires.
    save_worker(redis, idle.record().model_copy(update={"name": "host:3"}), ttl_s=0.2)
    assert len(api.get("/v1/workers").json()["items"]) == 3
    time.sleep(0.4)
    assert len(api.get("/v1/workers").json()["items"]) == 2
    redis.close()
