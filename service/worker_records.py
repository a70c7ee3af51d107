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


# The names of the workers that saved a record, so that reading them all is one round trip,
# not a SCAN of the keyspace (thousands of RQ keys on a busy install); and a count of the
# workers that came and went, which tells the dispatcher when to read them again.
NAMES_KEY = f"{KEY_PREFIX}:workers"
GENERATION_KEY = f"{KEY_PREFIX}:workers:generation"

# Every named worker's record, by name; the names whose record expired are forgotten (and
# counted as gone).
_READ_ALL = """
local names = redis.call('SMEMBERS', KEYS[1])
table.sort(names)
local found, gone = {}, 0
for _, name in ipairs(names) do
  local record = redis.call('GET', ARGV[1] .. name)
  if record then
    found[#found + 1] = record
  else
    redis.call('SREM', KEYS[1], name)
    gone = gone + 1
  end
end
if gone > 0 then redis.call('INCR', KEYS[2]) end
return found
"""


def save_worker_record(redis: Redis, name: str, record: dict[str, Any], ttl_s: float) -> None:
    """A worker's heartbeat: its record (JSON), kept for `ttl_s` unless refreshed."""
    with redis.pipeline(transaction=False) as pipe:
        pipe.set(worker_key(name), json.dumps(record), px=max(1, int(ttl_s * 1000)))
        pipe.sadd(NAMES_KEY, name)
        _, added = pipe.execute()
    if added:
        redis.incr(GENERATION_KEY)


def save_worker(redis: Redis, record: WorkerRecord, ttl_s: float) -> None:
    """`save_worker_record` of a worker's typed record."""
    save_worker_record(redis, record.name, record.model_dump(mode="json"), ttl_s)


def delete_worker_record(redis: Redis, name: str) -> None:
    with redis.pipeline(transaction=False) as pipe:
        pipe.delete(worker_key(name))
        pipe.srem(NAMES_KEY, name)
        pipe.incr(GENERATION_KEY)
        pipe.execute()


def workers_generation(redis: Redis) -> int:
    """A count that changes whenever a worker saves its first record or its record goes."""
    return int(redis.get(GENERATION_KEY) or 0)


def stored_worker_records(redis: Redis) -> list[bytes | str]:
    """The stored record of every worker whose heartbeat has not expired, by name, unread."""
    return list(redis.eval(_READ_ALL, 2, NAMES_KEY, GENERATION_KEY, worker_key("")))


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
