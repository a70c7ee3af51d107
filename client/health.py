"""`launchbay worker --check`: is a worker of this host alive, by its heartbeat in Redis?

Imported only by that command (it needs Redis and the service's settings, not the API).
"""

from datetime import UTC, datetime
from typing import Any

from redis import Redis
from redis.exceptions import RedisError

from service.settings import Settings
from service.worker_records import read_worker_records


def check_worker_heartbeat(settings: Settings, max_age_s: float | None = None) -> tuple[bool, str]:
    """(healthy, why): a worker record of `settings.worker_host` whose last heartbeat is at
    most `max_age_s` old (default: three heartbeat intervals, at least 15 s). Records of
    workers that stopped heart-beating expire in Redis, so a hung or dead worker has none."""
    max_age = max_age_s if max_age_s is not None else max(15.0, 3 * settings.heartbeat_interval_s)
    host = settings.worker_host
    try:
        redis = Redis.from_url(settings.redis_url, socket_connect_timeout=5, socket_timeout=5)
        records = read_worker_records(redis)
    except RedisError as exc:
        return False, f"cannot read heartbeats from Redis: {exc}"
    ages = [_age_s(r) for r in records if r.get("host") == host]
    fresh = [age for age in ages if age is not None and age <= max_age]
    if fresh:
        return True, f"worker of {host} heart-beat {min(fresh):.1f}s ago"
    if ages:
        return False, f"no heartbeat from a worker of {host} in the last {max_age:g}s"
    return False, f"no worker of {host} is registered"


def _age_s(record: dict[str, Any]) -> float | None:
    try:
        then = datetime.fromisoformat(str(record.get("last_heartbeat")))
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return (datetime.now(UTC) - then).total_seconds()
