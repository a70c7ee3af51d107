"""The workers' records in Redis, which GET /v1/workers lists and the dispatcher places jobs
by: each `launchbay worker` keeps its own (`worker.rq_worker`), with a short TTL.

`KEY_PREFIX` begins every Redis key Launchbay names itself, but not all of them are built
here: the dispatcher's wake-up list is `service.executors.dispatch.WAKE_KEY`, the rate limits'
counters `service.policy.RATE_KEY` and `service.code_usage.UPLOAD_RATE_KEY`; the RQ queues
(each worker's own under the dispatcher: `service.scheduling.capacity.dispatch_queue_name`)
are named by Launchbay and keyed by RQ."""

import json
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError
from redis import Redis

from service.schemas import WorkerRecord

KEY_PREFIX = "launchbay"


def worker_key(name: str) -> str:
    """Set with a short TTL by each `launchbay worker`: what GET /v1/workers lists."""
    return f"{KEY_PREFIX}:worker:{name}"


WORKER_KEY_PATTERN = worker_key("*")


def save_worker_record(redis: Redis, name: str, record: dict[str, Any], ttl_s: float) -> None:
    """A worker's heartbeat: its record (JSON), kept for `ttl_s` unless refreshed."""
    redis.set(worker_key(name), json.dumps(record), px=max(1, int(ttl_s * 1000)))


def save_worker(redis: Redis, record: WorkerRecord, ttl_s: float) -> None:
    """`save_worker_record` of a worker's typed record."""
    save_worker_record(redis, record.name, record.model_dump(mode="json"), ttl_s)


def delete_worker_record(redis: Redis, name: str) -> None:
    redis.delete(worker_key(name))


def stored_worker_records(redis: Redis) -> list[bytes | str]:
    """The stored record of every worker whose heartbeat has not expired, by name, unread."""
    keys = sorted(redis.scan_iter(match=WORKER_KEY_PATTERN, count=500))
    # None: expired between the scan and the read.
    return [raw for raw in (redis.mget(keys) if keys else []) if raw is not None]


def read_worker_records(redis: Redis) -> list[dict[str, Any]]:
    """The records of every worker whose heartbeat has not expired, by name, as stored."""
    return _objects(stored_worker_records(redis))


def _objects(stored: Iterable[bytes | str]) -> list[dict[str, Any]]:
    records = []
    for raw in stored:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def load_worker_records(redis: Redis) -> list[WorkerRecord]:
    """`read_worker_records`, typed; a record of another version, or damaged, is skipped."""
    return typed_worker_records(stored_worker_records(redis))


def typed_worker_records(stored: Iterable[bytes | str]) -> list[WorkerRecord]:
    """The records `stored_worker_records` read, typed (as `load_worker_records`)."""
    records = []
    for raw in _objects(stored):
        try:
            records.append(WorkerRecord.model_validate(raw))
        except ValidationError:
            continue
    return records
