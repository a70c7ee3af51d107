"""One watcher of the database per API process that wakes the event streams whose job changed.

Every open event stream (`GET /v1/jobs/{id}/events`) waits on this notifier instead of
polling the database itself. While at least one stream waits, one poller asks the database
every `interval_s` for the `last_seq` and state of the jobs being watched, in one query, and
wakes the streams of the jobs whose row changed; a stream then reads its new rows once. Cost
per tick is one indexed query whatever the number of streams, and none at all when nobody
watches.

Why a poller and not PostgreSQL's LISTEN/NOTIFY or Redis pub/sub: a job's rows are written by
other processes (workers on other hosts, the reaper, other API processes) on SQLite as on
PostgreSQL, and `Job.last_seq` is the one value every one of those writes moves in the same
transaction. Reading it needs no change in any writer and cannot miss a writer that forgot to
publish; LISTEN/NOTIFY does not exist on SQLite, and a lost pub/sub message would stall a
stream (docs/benchmarks.md, "Flat costs", has the measurements).

Use: `watch(job_id)` before reading the job's stream, then `wait()` when the read brought
nothing. A change that lands between the read and the wait still wakes the waiter: the
subscription's flag is set by the poller and cleared only by `wait()` returning.
"""

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, select

from service.models import Job

log = logging.getLogger("launchbay.stream")
# How many job ids one poll query names at most (SQLite's bound parameter limit is 32766).
MAX_IDS_PER_QUERY = 900


class Subscription:
    """One stream's interest in one job: set when the job's row changed."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._changed = asyncio.Event()
        # Set at once: the first read is due whatever the poller has seen.
        self._changed.set()

    def notify(self) -> None:
        self._changed.set()

    async def wait(self, timeout_s: float) -> None:
        """Until the job changed since the last `wait()` (or for `timeout_s`, a safety net)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        self._changed.clear()


class StreamNotifier:
    """The poller and its subscriptions, owned by the app (started in its lifespan)."""

    def __init__(self, engine: Engine, interval_s: float) -> None:
        self.engine = engine
        self.interval_s = interval_s
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        # (last_seq, state) of each watched job when last polled; absent: not seen yet.
        self._seen: dict[str, tuple[int, str] | None] = {}
        self._someone_waits = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.polls = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stream-notifier")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Iterator[Subscription]:
        """A subscription to `job_id` for the duration of the block."""
        subscription = Subscription(job_id)
        self._subscriptions[job_id].add(subscription)
        self._someone_waits.set()
        try:
            yield subscription
        finally:
            watchers = self._subscriptions.get(job_id)
            if watchers is not None:
                watchers.discard(subscription)
                if not watchers:
                    del self._subscriptions[job_id]
                    self._seen.pop(job_id, None)

    @property
    def watched(self) -> int:
        return sum(len(s) for s in self._subscriptions.values())

    async def _run(self) -> None:
        while True:
            if not self._subscriptions:
                self._someone_waits.clear()
                await self._someone_waits.wait()
            try:
                await self.poll_once()
            except Exception as exc:  # the database away: streams wait, then time out
                log.warning("stream notifier: poll failed: %s: %s", type(exc).__name__, exc)
            await asyncio.sleep(self.interval_s)

    async def poll_once(self) -> None:
        """Read the watched jobs' positions once and wake the watchers of those that moved."""
        job_ids = list(self._subscriptions)
        if not job_ids:
            return
        now = await anyio.to_thread.run_sync(read_positions, self.engine, job_ids)
        self.polls += 1
        for job_id in job_ids:
            position = now.get(job_id)
            if job_id in self._seen and self._seen[job_id] == position:
                continue
            self._seen[job_id] = position
            for subscription in self._subscriptions.get(job_id, ()):
                subscription.notify()


def read_positions(engine: Engine, job_ids: list[str]) -> dict[str, tuple[int, str]]:
    """`(last_seq, state)` of each job that exists, by id (deleted jobs are absent)."""
    found: dict[str, tuple[int, str]] = {}
    with Session(engine) as session:
        for start in range(0, len(job_ids), MAX_IDS_PER_QUERY):
            chunk = job_ids[start : start + MAX_IDS_PER_QUERY]
            stmt: Any = select(Job.id, Job.last_seq, Job.state).where(col(Job.id).in_(chunk))
            for job_id, last_seq, state in session.exec(stmt).all():
                found[job_id] = (int(last_seq), str(state))
    return found
