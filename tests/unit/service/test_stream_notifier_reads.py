"""Streams of one job share a read of its new rows, but never one that began before a change
they were woken for (the database is a fake here: positions from a dict, marks dropped)."""

import asyncio
from typing import Any

import pytest

from service import stream_notifier
from service.stream_notifier import StreamNotifier


@pytest.fixture(autouse=True)
def no_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_notifier, "mark_watched", lambda engine, ids: None)


def test_streams_woken_together_share_one_read_but_not_a_stale_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    positions = {"j1": 5}
    monkeypatch.setattr(stream_notifier, "read_positions", lambda engine, ids: dict(positions))
    reads: list[int] = []

    async def scenario() -> list[Any]:
        notifier = StreamNotifier(engine=None, interval_s=0.05)  # type: ignore[arg-type]
        release = asyncio.Event()

        async def read() -> int:
            reads.append(notifier.generation("j1"))
            await release.wait()
            return len(reads)

        with notifier.watch("j1"):
            await notifier.poll_once()  # first sighting: generation 1
            first = [asyncio.create_task(notifier.shared_read("j1", 5, read)) for _ in range(20)]
            await asyncio.sleep(0)
            positions["j1"] = 6  # a row committed while that read is under way
            await notifier.poll_once()  # generation 2
            late = asyncio.create_task(notifier.shared_read("j1", 5, read))
            await asyncio.sleep(0)
            release.set()
            return [*(await asyncio.gather(*first)), await late]

    results = asyncio.run(scenario())
    assert reads == [1, 2]  # one read for the twenty, a new one for the stream woken later
    assert results == [2] * 21  # (each read returns how many reads had begun when it ended)


def test_a_read_that_found_rows_is_kept_for_later_streams_and_an_empty_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    positions = {"j1": 5}
    monkeypatch.setattr(stream_notifier, "read_positions", lambda engine, ids: dict(positions))
    reads: list[int] = []

    async def scenario() -> list[Any]:
        notifier = StreamNotifier(engine=None, interval_s=0.05)  # type: ignore[arg-type]

        async def read(found: int) -> int:
            reads.append(found)
            return found

        def found_rows(result: int) -> bool:
            return result > 0

        with notifier.watch("j1"):
            await notifier.poll_once()
            first = await notifier.shared_read("j1", 3, lambda: read(2), keep=found_rows)
            empty = await notifier.shared_read("j1", 5, lambda: read(0), keep=found_rows)
            positions["j1"] = 7  # a change: a stream woken for it may still reuse the rows
            await notifier.poll_once()
            again = await notifier.shared_read("j1", 3, lambda: read(99), keep=found_rows)
            reread = await notifier.shared_read("j1", 5, lambda: read(2), keep=found_rows)
            assert notifier.reached("j1", 7) and not notifier.reached("j1", 5)
        # Unwatched: nothing kept.
        with notifier.watch("j1"):
            fresh = await notifier.shared_read("j1", 3, lambda: read(2), keep=found_rows)
        return [first, empty, again, reread, fresh]

    assert asyncio.run(scenario()) == [2, 0, 2, 2, 2]
    assert reads == [2, 0, 2, 2]  # the kept read served the stream at 3 after the change
