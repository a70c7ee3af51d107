"""`AsyncClient` on a fake transport: retries, errors and event streams as `Client` has them."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import pytest

from client import AsyncClient, ConnectionFailed, NotFound
from tests.unit.client.conftest import API_URL, FakeApi, error_body, job, reply
from tests.unit.client.test_client_sse import EVENTS, sse

T = TypeVar("T")


def run(api: FakeApi, scenario: Callable[[AsyncClient], Awaitable[T]]) -> T:
    async def main() -> T:
        transport = httpx.MockTransport(api)
        async with AsyncClient(API_URL, "secret", transport=transport, backoff_s=0) as lb:
            return await scenario(lb)

    return asyncio.run(main())


def test_a_get_is_retried_on_503_and_returns_a_job(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/j1", error_body(503, "unavailable", "db down"), reply(200, job()))
    found = run(api, lambda lb: lb.get_job("j1"))
    assert found.id == "j1" and len(api.requests) == 2
    assert api.requests[0].headers["Authorization"] == "Bearer secret"


def test_errors_are_the_clients(api: FakeApi) -> None:
    api.on("GET", "/v1/jobs/nope", error_body(404, "not_found", "no job 'nope'"))
    with pytest.raises(NotFound, match="no job 'nope'"):
        run(api, lambda lb: lb.get_job("nope"))
    api.on("POST", "/v1/jobs/j1/cancel", httpx.ConnectError("refused"))
    with pytest.raises(ConnectionFailed):
        run(api, lambda lb: lb.cancel_job("j1"))
    assert len(api.sent("POST", "/v1/jobs/j1/cancel")) == 1  # a POST is never retried


def test_the_event_stream_ends_with_the_job(api: FakeApi) -> None:
    stream = sse((1, "state", {"state": "running"}), (2, "state", {"state": "succeeded"}))
    api.on("GET", EVENTS, reply(200, content=stream))

    async def follow(lb: AsyncClient) -> list[str]:
        return [event.data["state"] async for event in lb.stream_events("j1")]

    assert run(api, follow) == ["running", "succeeded"]
