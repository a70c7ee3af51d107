"""A job's live stream as Server-Sent Events, resumable with Last-Event-ID."""

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Header, Query, Request
from sqlalchemy.engine import Engine
from sqlmodel import Session
from sse_starlette import EventSourceResponse

from jobs.states import JobState
from service import records
from service.deps import MAX_SEQ, OwnedJob, SessionDep
from service.errors import BadRequest
from service.models import JobEvent, LogLine, MetricPoint
from service.schemas import CheckpointPublic, LogLinePublic, MetricPointPublic
from service.stream_notifier import StreamNotifier

router = APIRouter(prefix="/v1/jobs", tags=["events"])
# A stream reads again at least this often even if no change was noticed (a safety net only:
# the notifier wakes it when its job changes).
REREAD_S = 30.0


@router.get("/{job_id}/events", response_class=EventSourceResponse)
async def stream_events(
    job: OwnedJob,
    request: Request,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
) -> EventSourceResponse:
    """state, metric, log and checkpoint events with the job's seq as id; ends after the
    terminal state event. A reconnecting client sends Last-Event-ID (or `?after=`)."""
    cursor = after or 0
    if last_event_id:
        try:
            cursor = int(last_event_id)
        except ValueError:
            cursor = -1
        if not 0 <= cursor <= MAX_SEQ:
            raise BadRequest("Last-Event-ID must be an event id from this stream")
    engine: Engine = request.app.state.engine
    notifier: StreamNotifier = request.app.state.stream_notifier
    return EventSourceResponse(_follow(engine, notifier, job.id, cursor), ping=15, send_timeout=30)


@dataclass(frozen=True)
class Batch:
    """One read of a job's stream, encoded once as the SSE bytes every stream that shares it
    sends (one write per read to each client, not one per event)."""

    payload: bytes
    events: int
    cursor: int
    ended: bool
    terminal: bool


async def _follow(
    engine: Engine, notifier: StreamNotifier, job_id: str, cursor: int
) -> AsyncIterator[bytes]:
    # Subscribed before the first read: a row committed after that read wakes the wait.
    with notifier.watch(job_id) as subscription:
        read_anyway = True  # the first read, and one after a wait that timed out
        while True:
            read_anyway = not await subscription.wait(REREAD_S) or read_anyway
            while read_anyway or not notifier.reached(job_id, cursor):
                read_anyway = False
                after = cursor
                try:
                    batch = await notifier.shared_read(
                        job_id,
                        after,
                        partial(anyio.to_thread.run_sync, read_batch, engine, job_id, after),
                        keep=_found_rows,
                    )
                except LookupError:
                    return  # the job was deleted while followed
                cursor = batch.cursor
                if batch.payload:
                    yield batch.payload
                if batch.terminal:
                    return
                if not batch.events:
                    if batch.ended:
                        return  # resumed past the job's end: nothing more will come
                    break


def _found_rows(batch: Batch) -> bool:
    return batch.events > 0


def prefetch_batch(engine: Engine, job_id: str, cursor: int) -> Batch | None:
    """The notifier's read for the streams of a job that moved (None: nothing to share)."""
    batch = read_batch(engine, job_id, cursor)
    return batch if _found_rows(batch) else None


def read_batch(engine: Engine, job_id: str, cursor: int) -> Batch:
    with Session(engine) as session:
        read = records.read_stream(session, job_id, after=cursor)
    frames: list[str] = []
    for row in read.rows:
        kind, data = stream_event(row)
        frames.append(sse_frame(row.seq, kind, data))
        if kind == "state" and JobState(data["state"]).is_terminal():
            return Batch(_encode(frames), len(frames), row.seq, read.ended, terminal=True)
    return Batch(_encode(frames), len(frames), read.cursor, read.ended, terminal=False)


def sse_frame(seq: int, kind: str, data: dict[str, Any]) -> str:
    """One event as sse_starlette writes it (CRLF line ends); JSON holds no line break."""
    return f"id: {seq}\r\nevent: {kind}\r\ndata: {json.dumps(data)}\r\n\r\n"


def _encode(frames: list[str]) -> bytes:
    return "".join(frames).encode()


@router.get("/{job_id}/timeline")
def get_timeline(job: OwnedJob, session: SessionDep) -> dict[str, Any]:
    """The job's life without its output: its `state`, `restart` and other event rows, in the
    stream's shape (`{"id", "event", "data"}`), so a page that follows the stream from its
    current seq can still draw the job's whole timeline. `next_after`: the job's seq when
    read (follow the events from there)."""
    rows = records.list_job_events(session, job.id, up_to=job.last_seq)
    return {
        "items": [
            {"id": str(row.seq), "event": kind, "data": data}
            for row in rows
            for kind, data in [stream_event(row)]
        ],
        "next_after": job.last_seq,
    }


def stream_event(row: records.StreamRow) -> tuple[str, dict[str, Any]]:
    """(event name, data) of one row, in the shapes the API's other routes answer with."""
    if isinstance(row, JobEvent):
        return row.kind, {**row.data, "attempt": row.attempt, "ts": row.ts}
    if isinstance(row, MetricPoint):
        return "metric", MetricPointPublic.from_row(row).model_dump(mode="json")
    if isinstance(row, LogLine):
        return "log", LogLinePublic.from_row(row).model_dump(mode="json")
    return "checkpoint", CheckpointPublic.from_row(row).model_dump(mode="json")
