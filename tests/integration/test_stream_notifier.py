"""Idle event streams cost one query per tick per API process, whatever their number, and a
row written by another process wakes exactly the streams of its job (real databases)."""

import asyncio
import contextlib
import json
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.states import ExitReason, JobState
from service import records
from service.models import Job
from service.settings import Settings
from service.stream_notifier import StreamNotifier
from tests.support.registry import running_job

# Another process writes as a worker does: log lines, then the job's end. One process, started
# once for the module (a start costs about a second of imports), takes each write as a line
# "<url> <job id> more|end" on its stdin, makes it on an engine of its own, disposed of after,
# and answers "written" once it is committed.
WRITER = """
import sys, time
from sqlmodel import Session
from jobs.states import ExitReason, JobState
from service import records
from service.db import make_engine
for command in sys.stdin:
    url, job_id, what = command.split()
    engine = make_engine(url)
    with Session(engine) as session:
        line = records.NewLogLine(0, time.time(), "from afar")
        records.append_log_lines(session, job_id, 1, [line])
        if what == "end":
            records.transition_job(session, job_id, JobState.SUCCEEDED, attempt=1,
                                   exit_reason=ExitReason.COMPLETED)
    engine.dispose()
    print("written", flush=True)
"""


class Writer:
    """The writing process (`WRITER`)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WRITER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lock = threading.Lock()

    def write(self, url: str, job_id: str, end: bool = False) -> None:
        """One write, returning once it is committed; fails with the writer's errors when it
        died, and after 60 s without an answer."""
        assert self.process.stdin is not None and self.process.stdout is not None
        with self.lock:
            self.process.stdin.write(f"{url} {job_id} {'end' if end else 'more'}\n")
            self.process.stdin.flush()
            ready, _, _ = select.select([self.process.stdout], [], [], 60)
            answer = self.process.stdout.readline() if ready else ""
        if answer != "written\n":
            self.process.kill()
            _, errors = self.process.communicate()
            pytest.fail(f"the writing process answered {answer!r}: {errors[-3000:]}")

    def close(self) -> None:
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self.process.stdin.close()  # its loop ends
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self.process.stdout.close()
            self.process.stderr.close()


@pytest.fixture(scope="module")
def writer() -> Iterator[Writer]:
    started = Writer()
    try:
        yield started
    finally:
        started.close()


def count_statements(engine: Engine) -> list[str]:
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: seen.append(args[2]))
    return seen


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_idle_streams_cost_one_query_a_tick_and_wake_on_their_job_only(
    engine: Engine, settings: Settings, writer: Writer
) -> None:
    jobs = [running_job(engine) for _ in range(3)]
    statements = count_statements(engine)

    async def scenario() -> dict[str, Any]:
        notifier = StreamNotifier(engine, interval_s=0.05)
        notifier.start()
        try:
            with contextlib.ExitStack() as watching:
                subscriptions = [watching.enter_context(notifier.watch(j)) for j in jobs * 20]
                # The first wait of each returns at once (its first read is due).
                await asyncio.gather(*(s.wait(1) for s in subscriptions))
                await notifier.poll_once()  # the positions seen: from now on, only changes
                await asyncio.gather(*(s.wait(0) for s in subscriptions))  # its first wake-ups
                statements.clear()
                polls = notifier.polls
                deadline = time.monotonic() + 10  # 5 ticks (0.25 s idle; longer on a busy host)
                while notifier.polls - polls < 5 and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                idle = {"statements": len(statements), "ticks": notifier.polls - polls}
                woken: set[str] = set()

                async def waiter(s: Any) -> None:
                    await s.wait(10)
                    woken.add(s.job_id)

                waiters = [asyncio.create_task(waiter(s)) for s in subscriptions]
                await asyncio.to_thread(writer.write, settings.resolved_database_url, jobs[0])
                deadline = time.monotonic() + 5
                while jobs[0] not in woken and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.2)  # a few ticks more: nobody else wakes
                for task in waiters:
                    task.cancel()
                return {**idle, "woken": woken}
        finally:
            await notifier.stop()

    result = asyncio.run(scenario())
    # 60 idle streams: the poller's one query a tick, not one per stream and tick.
    assert result["ticks"] >= 5
    assert result["statements"] <= result["ticks"] + 1
    assert result["woken"] == {jobs[0]}


def read_events(api: TestClient, job_id: str, headers: dict[str, str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    with api.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as response:
        assert response.status_code == 200
        current: dict[str, Any] = {}
        for line in response.iter_lines():
            if line.startswith(("id:", "event:", "data:")):
                key, _, value = line.partition(":")
                current[key] = value.strip()
            elif not line and "id" in current:
                events.append({**current, "data": json.loads(current["data"])})
                current = {}
    return events


def test_a_stream_resumes_exactly_and_is_woken_by_a_later_write(
    api: TestClient, engine: Engine
) -> None:
    job_id = running_job(engine)
    with Session(engine) as session:
        records.append_log_lines(
            session, job_id, 1, [records.NewLogLine(0, 0.0, f"l{i}") for i in range(5)]
        )
    # Resume after the 2nd log line (the job's seqs: queued, starting, running, then lines).
    resume_after = 5

    def write_and_end() -> None:
        """On a connection of its own (another process's write is the test above)."""
        with Session(engine) as session:
            records.append_log_lines(session, job_id, 1, [records.NewLogLine(0, 0.0, "from afar")])
            records.transition_job(
                session, job_id, JobState.SUCCEEDED, attempt=1, exit_reason=ExitReason.COMPLETED
            )

    # Written while the stream waits: after its first read, before anything else happens.
    writer = threading.Timer(0.5, write_and_end)
    writer.start()
    try:
        events = read_events(api, job_id, {"Last-Event-ID": str(resume_after)})
    finally:
        writer.join()
    seqs = [int(e["id"]) for e in events]
    assert seqs == list(range(resume_after + 1, resume_after + 1 + len(seqs)))
    assert [e["data"]["line"] for e in events if e["event"] == "log"] == [
        "l2",
        "l3",
        "l4",
        "from afar",
    ]
    assert events[-1]["event"] == "state" and events[-1]["data"]["state"] == "succeeded"
    # A stream resumed at the end answers at once and ends.
    assert read_events(api, job_id, {"Last-Event-ID": str(seqs[-1])}) == []


def parse_frames(chunks: list[bytes]) -> list[tuple[int, str, dict[str, Any]]]:
    """(id, event, data) of each SSE frame in the chunks a stream sent."""
    frames = []
    for frame in b"".join(chunks).decode().split("\r\n\r\n"):
        if frame:
            fields = dict(line.split(": ", 1) for line in frame.split("\r\n"))
            frames.append((int(fields["id"]), fields["event"], json.loads(fields["data"])))
    return frames


@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetched", "read-by-streams"])
@pytest.mark.parametrize("database_url", ["sqlite", "postgres"], indirect=True)
def test_streams_of_one_job_share_each_read_and_each_gets_every_row_once(
    engine: Engine, settings: Settings, writer: Writer, prefetch: bool
) -> None:
    """Thirty streams follow one job (some from its start, some resumed mid-way, some joining
    while it writes) while another process writes to it: each gets every row after its own
    cursor exactly once, in order, and the job's rows are read about once per change, not
    once per stream; whether the poller reads a moved job's rows itself (as the app's does)
    or its streams do."""
    from service.routes.events import _follow, prefetch_batch

    job_id = running_job(engine)
    statements = count_statements(engine)
    writes = 6

    async def scenario() -> dict[str, list[bytes]]:
        notifier = StreamNotifier(
            engine, interval_s=0.05, prefetch=partial(prefetch_batch, engine) if prefetch else None
        )
        notifier.start()
        received: dict[str, list[bytes]] = {}

        async def follow(label: str, cursor: int) -> None:
            chunks = received.setdefault(label, [])
            async for chunk in _follow(engine, notifier, job_id, cursor):
                chunks.append(chunk)

        try:
            followers = [asyncio.create_task(follow(f"start-{i}", 0)) for i in range(20)]
            followers += [asyncio.create_task(follow(f"resumed-{i}", 2)) for i in range(5)]
            for n in range(writes):
                await asyncio.to_thread(
                    writer.write,
                    settings.resolved_database_url,
                    job_id,
                    n == writes - 1,
                )
                if n == 2:  # joining while the job writes, at the seq just read
                    followers += [asyncio.create_task(follow(f"late-{i}", 0)) for i in range(5)]
                await asyncio.sleep(0.2)
            await asyncio.wait_for(asyncio.gather(*followers), 30)
        finally:
            await notifier.stop()
        return received

    received = asyncio.run(scenario())
    # The job's seqs: queued, starting, running, 6 lines, succeeded.
    everything = list(range(1, 4 + writes + 1))
    for label, chunks in received.items():
        seqs = [seq for seq, _, _ in parse_frames(chunks)]
        assert seqs == (everything[2:] if label.startswith("resumed") else everything), label
        assert parse_frames(chunks)[-1][2]["state"] == "succeeded"
    assert len(received) == 30
    # Reads of the job's log lines: one per change (and a few for streams that joined or
    # resumed elsewhere), not one per stream and change (which would be over 150).
    line_reads = [s for s in statements if "FROM log_line" in s]
    assert len(line_reads) <= 3 * (writes + 2)


def test_jobs_streams_watch_are_marked_watched_while_active_and_their_supervisors_read_it(
    engine: Engine,
) -> None:
    """The poller marks the watched jobs that are still active (`Job.watched_at`), at most every
    WATCH_MARK_S; a supervisor's read of the job's signals says watched (it then stores every
    poll); a job nobody watches is not marked, nor is a finished one."""
    watched, finished, unwatched = (running_job(engine) for _ in range(3))
    with Session(engine) as session:
        records.transition_job(
            session, finished, JobState.SUCCEEDED, attempt=1, exit_reason=ExitReason.COMPLETED
        )
    statements = count_statements(engine)

    async def scenario() -> None:
        notifier = StreamNotifier(engine, interval_s=0.05)
        notifier.start()
        try:
            with notifier.watch(watched), notifier.watch(finished):
                for _ in range(5):
                    await notifier.poll_once()
        finally:
            await notifier.stop()

    asyncio.run(scenario())
    marks = [s for s in statements if s.lstrip().upper().startswith("UPDATE")]
    assert len(marks) == 1  # five polls within WATCH_MARK_S: one mark
    with Session(engine) as session:
        signals = {j: records.read_job_signals(session, j, 1) for j in (watched, unwatched)}
        assert signals[watched].watched() and signals[watched].state is JobState.RUNNING
        assert not signals[unwatched].watched() and signals[unwatched].watched_at is None
        assert session.get(Job, finished).watched_at is None  # type: ignore[union-attr]
