"""The SSE parser, and `Client.stream_events` reconnecting with Last-Event-ID."""

import json
from typing import Any

import httpx
import pytest

from client import Client, ConnectionFailed
from client.models import Event
from client.sse import SSEParser
from tests.unit.client.conftest import BrokenStream, FakeApi, job, reply

EVENTS = "/v1/jobs/j1/events"


def sse(*events: tuple[int, str, dict[str, Any]]) -> bytes:
    return b"".join(
        f"id: {i}\nevent: {kind}\ndata: {json.dumps(data)}\n\n".encode() for i, kind, data in events
    )


STREAM: list[tuple[int, str, dict[str, Any]]] = [
    (1, "state", {"state": "queued"}),
    (2, "state", {"state": "running"}),
    (3, "metric", {"step": 1, "name": "loss", "value": 0.9}),
    (4, "log", {"rank": 0, "line": "hello"}),
    (5, "checkpoint", {"id": "c1", "step": 1}),
    (6, "state", {"state": "succeeded", "exit_reason": "completed"}),
]


def test_parser_reads_fields_comments_and_multiline_data() -> None:
    text = (
        ": ping\n\n"
        'id: 7\nevent: log\ndata: {"line":\ndata:  "x"}\n\n'
        "retry: 2500\n"
        "data: plain text\r\n\r\n"
        "id: 9\n\n"
        "id: 10\nevent: metric\ndata: {}\n"
    )
    parser = SSEParser()
    events = list(parser.parse(text.splitlines()))
    assert events == [
        Event(id="7", event="log", data={"line": "x"}),
        Event(id="7", event="message", data="plain text"),
    ]
    assert parser.retry_ms == 2500
    # The event with id 9 had no data, but its id counts; the cut-off event 10 does not.
    assert parser.last_event_id == "9"


def test_terminal_state_event() -> None:
    assert Event(id="1", event="state", data={"state": "cancelled"}).is_terminal
    assert not Event(id="1", event="state", data={"state": "cancelling"}).is_terminal
    assert not Event(id="1", event="log", data={"state": "failed"}).is_terminal


def test_events_end_after_the_terminal_state(api: FakeApi, lb: Client) -> None:
    body = sse(*STREAM) + sse((7, "log", {"rank": 0, "line": "never read"}))
    api.on("GET", EVENTS, reply(200, content=body, headers={"Content-Type": "text/event-stream"}))
    events = list(lb.stream_events("j1"))
    assert [e.id for e in events] == ["1", "2", "3", "4", "5", "6"]
    assert events[-1].data == {"state": "succeeded", "exit_reason": "completed"}
    assert events[2].data["value"] == 0.9
    assert api.requests[0].headers["Accept"] == "text/event-stream"
    assert "Last-Event-ID" not in api.requests[0].headers


def test_reconnect_resends_last_event_id_with_no_gap_and_no_repeat(
    api: FakeApi, lb: Client
) -> None:
    def resume(request: httpx.Request) -> httpx.Response:
        after = int(request.headers.get("Last-Event-ID", "0"))
        rest = [e for e in STREAM if e[0] > after]
        return httpx.Response(200, content=sse(*rest))

    # The first connection delivers events 1-3 and half of event 4, then drops.
    first = sse(*STREAM[:3]) + sse(STREAM[3])[:15]
    api.on(
        "GET",
        EVENTS,
        lambda request: httpx.Response(200, stream=BrokenStream(first)),
        resume,
    )
    events = list(lb.stream_events("j1"))
    assert [e.id for e in events] == ["1", "2", "3", "4", "5", "6"]
    assert [r.headers.get("Last-Event-ID") for r in api.requests] == [None, "3"]


def test_replayed_events_are_not_yielded_twice(api: FakeApi, lb: Client) -> None:
    # A server that ignores Last-Event-ID and replays from the start.
    api.on(
        "GET",
        EVENTS,
        lambda request: httpx.Response(200, stream=BrokenStream(sse(*STREAM[:2]))),
        reply(200, content=sse(*STREAM)),
    )
    assert [e.id for e in lb.stream_events("j1")] == ["1", "2", "3", "4", "5", "6"]


def test_starts_after_the_given_last_event_id(api: FakeApi, lb: Client) -> None:
    api.on("GET", EVENTS, reply(200, content=sse(*STREAM[4:])))
    assert [e.id for e in lb.stream_events("j1", last_event_id="4")] == ["5", "6"]
    assert api.requests[0].headers["Last-Event-ID"] == "4"


def test_stream_closed_after_the_end_asks_the_job_and_stops(api: FakeApi, lb: Client) -> None:
    api.on("GET", EVENTS, reply(200, content=b": ping\n\n"))
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="cancelled")))
    assert list(lb.stream_events("j1", last_event_id="6")) == []
    assert len(api.sent("GET", EVENTS)) == 1


def test_stream_closed_early_is_reopened(
    api: FakeApi, lb: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Client, "_backoff", lambda self, attempt, server_ms=None: None)
    api.on(
        "GET", EVENTS, reply(200, content=sse(*STREAM[:2])), reply(200, content=sse(*STREAM[2:]))
    )
    api.on("GET", "/v1/jobs/j1", reply(200, job(state="running")))
    assert [e.id for e in lb.stream_events("j1")] == ["1", "2", "3", "4", "5", "6"]
    assert [r.headers.get("Last-Event-ID") for r in api.sent("GET", EVENTS)] == [None, "2"]


def test_gives_up_when_reconnects_bring_nothing(api: FakeApi, lb: Client) -> None:
    lb.reconnect_s = 0  # no outage window: `retries` reconnects in a row are all it takes
    api.on("GET", EVENTS, lambda request: httpx.Response(200, stream=BrokenStream(b"")))
    with pytest.raises(ConnectionFailed):
        list(lb.stream_events("j1"))
    assert len(api.requests) == lb.retries + 1


class Outage:
    """An API that stops answering once the first stream was served, until `back_at` on a
    clock that moves only when the client backs off (5 s a time)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, back_at: float) -> None:
        self.now, self.back_at, self.served = 0.0, back_at, 0
        monkeypatch.setattr("client.http.time.monotonic", lambda: self.now)
        monkeypatch.setattr(
            Client, "_backoff", lambda client, attempt, server_ms=None: self.pass_time()
        )

    def pass_time(self) -> None:
        self.now += 5.0

    def check_up(self, request: httpx.Request) -> None:
        if self.served and self.now < self.back_at:
            raise httpx.ConnectError("connection refused", request=request)

    def events(self, request: httpx.Request) -> httpx.Response:
        self.check_up(request)
        self.served += 1
        return httpx.Response(200, content=sse(*(STREAM[:2] if self.served == 1 else STREAM[2:])))

    def job(self, request: httpx.Request) -> httpx.Response:
        self.check_up(request)
        return httpx.Response(200, json=job(state="running"))


def test_a_stream_follows_its_job_through_an_api_restart(
    api: FakeApi, lb: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The API closes the stream as it stops and answers nothing for 40 s: far longer than one
    # request's own retries last, well inside the stream's reconnect window.
    outage = Outage(monkeypatch, back_at=40.0)
    api.on("GET", EVENTS, outage.events)
    api.on("GET", "/v1/jobs/j1", outage.job)
    assert [e.id for e in lb.stream_events("j1")] == ["1", "2", "3", "4", "5", "6"]
    assert outage.now >= 40.0
    assert api.sent("GET", EVENTS)[-1].headers.get("Last-Event-ID") == "2"


def test_a_stream_gives_up_once_the_api_stays_away_past_the_window(
    api: FakeApi, lb: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    outage = Outage(monkeypatch, back_at=float("inf"))
    api.on("GET", EVENTS, outage.events)
    api.on("GET", "/v1/jobs/j1", outage.job)
    events = lb.stream_events("j1")
    assert [next(events).id, next(events).id] == ["1", "2"]
    with pytest.raises(ConnectionFailed):
        next(events)
    assert outage.now >= lb.reconnect_s
