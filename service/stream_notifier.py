"""One watcher of the database per API process that wakes the event streams whose job changed.

Every open event stream (`GET /v1/jobs/{id}/events`) waits on this notifier instead of
polling the database itself. While at least one stream waits, one poller asks the database
every `interval_s` for the `last_seq` and state of the jobs being watched, in one query, and
wakes the streams of the jobs whose row changed; a stream then reads its new rows once. Cost
per tick is one indexed query whatever the number of streams, and none at all when nobody
watches.

While no watched job changes for `IDLE_AFTER_S`, the poller ticks `IDLE_FACTOR` times less
often: a team's open tabs on queued or finished-looking jobs cost a few small queries a
second, and the first change after a quiet spell is seen within that longer tick.

Streams of one job that wake together share one read of its new rows (`shared_read`), and
the read's result, already encoded as the bytes every stream sends: a hundred tabs on one
running job cost one query and one encoding per change, not a hundred. A read that found rows
is kept for the streams that come to the same position a little later (rows up to a job's
`last_seq` never change, so such a read stays true); a read that found nothing is shared only
by streams woken no later than it began. After a read, a stream that reached the job's
position as last polled waits for the next change instead of reading again to find nothing.
With a `prefetch` (the app's: the events route's read), the poller itself reads a job's new
rows after the position it last saw, in the same thread hop as the positions, before it wakes
the job's streams: those that were caught up find the read done and send at once.

Why a poller and not PostgreSQL's LISTEN/NOTIFY or Redis pub/sub: a job's rows are written by
other processes (workers on other hosts, the reaper, other API processes) on SQLite as on
PostgreSQL, and `Job.last_seq` is the one value every one of those writes moves in the same
transaction. Reading it needs no change in any writer and cannot miss a writer that forgot to
publish; LISTEN/NOTIFY does not exist on SQLite, and a lost pub/sub message would stall a
stream (docs/benchmarks.md, "Flat costs", has the measurements).

Every `WATCH_MARK_S` the poller also marks the watched jobs that are still active as watched
(`Job.watched_at`, one statement for all of them): their supervisors then store what the ranks
write every poll, for the streams' latency, where an unwatched job's output is stored once a
second to leave its ranks the CPU (`worker.ingest`).

Use: `watch(job_id)` before reading the job's stream, then `wait()` when the read brought
nothing. A change that lands between the read and the wait still wakes the waiter: the
subscription's flag is set by the poller and cleared only by `wait()` returning.
"""

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, cast

import anyio.to_thread
from sqlalchemy import bindparam, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from service.models import Job
from service.records import mark_watched

log = logging.getLogger("launchbay.stream")
T = TypeVar("T")
# How many job ids one poll query names at most (SQLite's bound parameter limit is 32766).
MAX_IDS_PER_QUERY = 900
# With no change seen for this long, the poller ticks `IDLE_FACTOR` times less often.
IDLE_AFTER_S = 2.0
IDLE_FACTOR = 5
# Reads that found rows, kept per watched job for streams that reach their position later.
KEPT_READS_PER_JOB = 16
# The generation of a kept read: newer than any change, so every later stream may share it.
KEPT = 2**62
# At most this many jobs' new rows read by the poller a tick (the others' streams read them).
PREFETCH_PER_TICK = 32
# How often the watched jobs are marked as such (`service.records.signals.WATCHED_FOR` is longer).
WATCH_MARK_S = 2.0
JOB = Job.__table__  # type: ignore[attr-defined]
POSITIONS = select(JOB.c.id, JOB.c.last_seq).where(JOB.c.id.in_(bindparam("ids", expanding=True)))


class Subscription:
    """One stream's interest in one job: set when the job's row changed."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._changed = asyncio.Event()
        # Set at once: the first read is due whatever the poller has seen.
        self._changed.set()

    def notify(self) -> None:
        self._changed.set()

    async def wait(self, timeout_s: float) -> bool:
        """Until the job changed since the last `wait()` (or for `timeout_s`, a safety net);
        whether it was woken rather than timed out."""
        woken = True
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except TimeoutError:
            woken = False
        self._changed.clear()
        return woken


class StreamNotifier:
    """The poller and its subscriptions, owned by the app (started in its lifespan)."""

    def __init__(
        self,
        engine: Engine,
        interval_s: float,
        prefetch: Callable[[str, int], Any] | None = None,
    ) -> None:
        """`prefetch(job_id, after)`: a stream's read of the job's rows after `after`, run in
        the poller's thread; None when it found nothing to share, LookupError when the job is
        gone."""
        self.engine = engine
        self.interval_s = interval_s
        self._prefetch = prefetch
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        # last_seq of each watched job when last polled (None: gone); absent: not seen yet.
        self._seen: dict[str, int | None] = {}
        # How many times each watched job was seen to change: a read started at generation g
        # saw every row committed before the change numbered g was noticed.
        self._generation: dict[str, int] = defaultdict(int)
        self._reads: dict[tuple[str, int], tuple[int, asyncio.Future[Any]]] = {}
        # The `after` of each job's kept reads, oldest first.
        self._kept: dict[str, list[int]] = defaultdict(list)
        self._last_change = 0.0
        self._next_mark = 0.0
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
                    self._generation.pop(job_id, None)
                    for after in self._kept.pop(job_id, ()):
                        self._reads.pop((job_id, after), None)

    @property
    def watched(self) -> int:
        return sum(len(s) for s in self._subscriptions.values())

    async def _run(self) -> None:
        while True:
            if not self._subscriptions:
                self._someone_waits.clear()
                await self._someone_waits.wait()
            try:
                if await self.poll_once():
                    self._last_change = time.monotonic()
            except Exception as exc:  # the database away: streams wait, then time out
                log.warning("stream notifier: poll failed: %s: %s", type(exc).__name__, exc)
            quiet = time.monotonic() - self._last_change > IDLE_AFTER_S
            await asyncio.sleep(self.interval_s * (IDLE_FACTOR if quiet else 1))

    async def poll_once(self) -> bool:
        """Read the watched jobs' positions once and wake the watchers of those that moved;
        whether any had (a job's first sighting counts: its watchers' reads may predate it)."""
        job_ids = list(self._subscriptions)
        if not job_ids:
            return False
        seen = {job_id: self._seen.get(job_id) for job_id in job_ids}
        now, fetched = await anyio.to_thread.run_sync(self._read_changes, seen)
        self.polls += 1
        changed = False
        for job_id in job_ids:
            position = now.get(job_id)
            if job_id in self._seen and self._seen[job_id] == position:
                continue
            changed = True
            previous = self._seen.get(job_id)
            if job_id in fetched and previous is not None and self._shareable(job_id, previous):
                done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                done.set_result(fetched[job_id])
                self._keep((job_id, previous), done)
            self._seen[job_id] = position
            self._generation[job_id] += 1
            for subscription in self._subscriptions.get(job_id, ()):
                subscription.notify()
        return changed

    def _read_changes(self, seen: dict[str, int | None]) -> tuple[dict[str, int], dict[str, Any]]:
        """(in a thread) The positions of the jobs in `seen`, and the prefetched rows of those
        that moved on from a position seen before."""
        job_ids = list(seen)
        self._mark(job_ids)
        now = read_positions(self.engine, job_ids)
        fetched: dict[str, Any] = {}
        if self._prefetch is None:
            return now, fetched
        for job_id, position in now.items():
            before = seen[job_id]
            if before is None or position <= before or len(fetched) >= PREFETCH_PER_TICK:
                continue
            with contextlib.suppress(LookupError):  # deleted since: its streams find out
                result = self._prefetch(job_id, before)
                if result is not None:
                    fetched[job_id] = result
        return now, fetched

    def _mark(self, job_ids: list[str]) -> None:
        """(in a thread) Mark the watched jobs as such, at most every `WATCH_MARK_S`."""
        if time.monotonic() < self._next_mark:
            return
        self._next_mark = time.monotonic() + WATCH_MARK_S
        try:
            for chunk in id_chunks(job_ids):
                mark_watched(self.engine, chunk)
        except SQLAlchemyError as exc:  # the streams still work; their output comes later
            log.warning("stream notifier: cannot mark watched jobs: %s", exc)

    def generation(self, job_id: str) -> int:
        return self._generation.get(job_id, 0)

    def reached(self, job_id: str, cursor: int) -> bool:
        """Whether `cursor` is at or past the job's `last_seq` as last polled: a later row
        moves `last_seq`, which the next poll sees and wakes the job's streams for. False
        while the job was not polled yet (or is gone: its read says so)."""
        position = self._seen.get(job_id)
        return position is not None and cursor >= position

    async def shared_read(
        self,
        job_id: str,
        after: int,
        read: Callable[[], Awaitable[T]],
        keep: Callable[[T], bool] = lambda _: False,
    ) -> T:
        """`read()` of the job's rows after `after`, shared with the other streams of the job
        at the same cursor whose read began no earlier than the last change this one knows of
        (an older read may have missed that change's rows). A result for which `keep` holds
        (one that found rows: they never change) is shared with every later stream too."""
        generation = self.generation(job_id)
        key = (job_id, after)
        found = self._reads.get(key)
        if found is None or found[0] < generation:
            task: asyncio.Task[Any] = asyncio.ensure_future(read())
            self._reads[key] = (generation, task)
            task.add_done_callback(lambda _: self._settle(key, task, keep))
            found = (generation, task)
        return cast(T, await asyncio.shield(found[1]))

    def _settle(
        self, key: tuple[str, int], task: asyncio.Task[Any], keep: Callable[..., bool]
    ) -> None:
        if self._reads.get(key, (0, None))[1] is not task:
            return
        job_id, after = key
        if task.cancelled() or task.exception() is not None or job_id not in self._subscriptions:
            del self._reads[key]
            return
        if not keep(task.result()):
            del self._reads[key]
            return
        self._keep(key, task)

    def _shareable(self, job_id: str, after: int) -> bool:
        """Whether no read kept for every stream is there yet at (`job_id`, `after`)."""
        return self._reads.get((job_id, after), (0, None))[0] != KEPT

    def _keep(self, key: tuple[str, int], done: asyncio.Future[Any]) -> None:
        """Share the finished read at `key` with every later stream of the job too."""
        job_id, after = key
        self._reads[key] = (KEPT, done)
        kept = self._kept[job_id]
        kept.append(after)
        while len(kept) > KEPT_READS_PER_JOB:
            self._reads.pop((job_id, kept.pop(0)), None)


def read_positions(engine: Engine, job_ids: list[str]) -> dict[str, int]:
    """`last_seq` of each job that exists, by id (deleted jobs are absent). Every write of a
    job's rows, state changes included, moves its `last_seq` in the same transaction."""
    found: dict[str, int] = {}
    with engine.connect() as connection:
        for chunk in id_chunks(job_ids):
            for job_id, last_seq in connection.execute(POSITIONS, {"ids": chunk}):
                found[job_id] = int(last_seq)
    return found


def id_chunks(job_ids: list[str]) -> Iterator[list[str]]:
    """`job_ids` in lists of at most `MAX_IDS_PER_QUERY`, one query's worth each."""
    for start in range(0, len(job_ids), MAX_IDS_PER_QUERY):
        yield job_ids[start : start + MAX_IDS_PER_QUERY]
