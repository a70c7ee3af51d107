"""`launchbay worker --check` (the worker container's healthcheck) against a real Redis."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from redis import Redis

from client.health import check_worker_heartbeat
from service.settings import Settings
from service.worker_records import save_worker_record


def _record(host: str, age_s: float) -> dict[str, object]:
    beat = datetime.now(UTC) - timedelta(seconds=age_s)
    return {"name": f"{host}:7", "host": host, "pid": 7, "last_heartbeat": beat.isoformat()}


def test_healthy_only_with_a_recent_heartbeat_of_this_host(redis_url: str, tmp_path: Path) -> None:
    settings = Settings(redis_url=redis_url, data_dir=tmp_path, worker_host="box-a")
    redis = Redis.from_url(redis_url)
    ok, why = check_worker_heartbeat(settings)
    assert (ok, why) == (False, "no worker of box-a is registered")

    save_worker_record(redis, "box-b:7", _record("box-b", 0), ttl_s=30)
    assert check_worker_heartbeat(settings)[0] is False  # another host's worker

    save_worker_record(redis, "box-a:7", _record("box-a", 40), ttl_s=30)
    ok, why = check_worker_heartbeat(settings, max_age_s=20)
    assert (ok, why) == (False, "no heartbeat from a worker of box-a in the last 20s")

    save_worker_record(redis, "box-a:7", _record("box-a", 1), ttl_s=30)
    ok, why = check_worker_heartbeat(settings, max_age_s=20)
    assert ok and why.startswith("worker of box-a heart-beat "), why


def test_unhealthy_when_redis_does_not_answer(tmp_path: Path) -> None:
    settings = Settings(redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path, worker_host="a")
    ok, why = check_worker_heartbeat(settings)
    assert not ok and why.startswith("cannot read heartbeats from Redis")
