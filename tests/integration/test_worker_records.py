"""The workers' records in a real Redis: read all at once from their names, a gone one
forgotten, and a count of workers coming and going that tells the dispatcher when to read
them again (over a real database too, SQLite and PostgreSQL)."""

import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from sqlmodel import Session

from devstack.workers import register_worker
from jobs.spec import JobSpec
from service import records
from service.db import make_engine
from service.scheduling import dispatcher as dispatcher_module
from service.scheduling.dispatcher import WOKEN_CAPACITY_AGE_S, Dispatcher
from service.settings import Settings
from service.worker_records import (
    NAMES_KEY,
    delete_worker_record,
    read_worker_records,
    save_worker_record,
    worker_key,
    workers_generation,
)


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    client.close()


def names(redis: Redis) -> list[str]:
    return [record["name"] for record in read_worker_records(redis)]


def test_records_are_read_by_name_and_one_that_expired_is_forgotten(redis: Redis) -> None:
    start = workers_generation(redis)
    save_worker_record(redis, "b", {"name": "b"}, ttl_s=30)
    save_worker_record(redis, "a", {"name": "a"}, ttl_s=30)
    assert names(redis) == ["a", "b"]
    assert workers_generation(redis) == start + 2
    save_worker_record(redis, "a", {"name": "a", "state": "busy"}, ttl_s=30)  # a heartbeat
    assert workers_generation(redis) == start + 2
    # A key no worker saved is no worker's record.
    redis.set(worker_key("stray"), b'{"name": "stray"}')
    assert names(redis) == ["a", "b"]

    save_worker_record(redis, "c", {"name": "c"}, ttl_s=0.05)
    time.sleep(0.2)
    assert names(redis) == ["a", "b"]
    assert not redis.sismember(NAMES_KEY, "c")
    assert workers_generation(redis) == start + 4  # c came, then went

    delete_worker_record(redis, "a")
    assert names(redis) == ["b"]
    assert workers_generation(redis) == start + 5
    save_worker_record(redis, "a", {"name": "a"}, ttl_s=30)  # back
    assert (names(redis), workers_generation(redis)) == (["a", "b"], start + 6)


@pytest.fixture
def dispatcher(settings: Settings, redis: Redis) -> Iterator[Dispatcher]:
    engine = make_engine(settings.resolved_database_url)
    found = Dispatcher(engine, redis, settings.model_copy(update={"dispatch_interval_s": 60.0}))
    yield found
    found.give_up()
    engine.dispose()


def test_a_woken_pass_reads_the_workers_again_only_when_some_came_or_went(
    dispatcher: Dispatcher, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    read = dispatcher_module.live_capacity

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return read(*args, **kwargs)

    monkeypatch.setattr(dispatcher_module, "live_capacity", counted)

    def woken_pass() -> list[str]:
        if dispatcher.capacity is not None:  # older than passes woken one after another
            read_at, generation, workers = dispatcher.capacity
            dispatcher.capacity = (read_at - 2 * WOKEN_CAPACITY_AGE_S, generation, workers)
        lease = dispatcher.keep_lease()
        assert lease is not None
        dispatcher.woken = True
        return dispatcher.run_pass(lease).admitted

    register_worker(redis, "w0")
    with Session(dispatcher.engine, expire_on_commit=False) as session:
        spec = JobSpec.model_validate({"name": "j", "recipe": "synthetic", "nproc_per_node": 1})
        first, second = (records.create_job(session, spec, owner="a").id for _ in range(2))
    assert woken_pass() == [first] and len(reads) == 1
    assert woken_pass() == [] and len(reads) == 1  # no worker came: w0 is still busy
    register_worker(redis, "w1")
    assert woken_pass() == [second] and len(reads) == 2  # read at once, not in a minute
    delete_worker_record(redis, "w1")
    woken_pass()
    assert len(reads) == 3
    assert [pool.name for pool in dispatcher.capacity[2]] == ["w0"]  # type: ignore[index]
