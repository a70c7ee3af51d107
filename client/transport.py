"""How `Client` and `AsyncClient` wait on the network: sending a `client.calls.Call` with its
retries, following a job's event stream, resuming a download, polling a job to its end. This
is the one place where the two clients differ, blocking on `httpx.Client` or awaiting
`httpx.AsyncClient`; the rules they follow (which request is retried, how long to back off,
where a stream resumes, where a download's redirect goes) are `client.retrying`'s.
"""

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

from client import calls, http
from client.calls import Call
from client.errors import ConnectionFailed, api_error_from_response
from client.models import Event, Job
from client.retrying import Download, EventFollow, RequestRetries, redirect_to_store

T = TypeVar("T")


class SyncTransport:
    """`Client`'s plumbing; `Client.__init__` sets what it reads."""

    api_url: str
    retries: int
    backoff_s: float
    reconnect_s: float
    _http: httpx.Client

    def _call(self, call: Call[T]) -> T:
        return call.read(http.json_body(self._send(call)))

    def _wait_for(self, job_id: str, timeout: float | None, poll_s: float) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self._call(calls.get_job(job_id))
            if job.is_terminal():
                return job
            job_id = job.id  # a prefix or a name, resolved once: `name@1` stays this job
            time.sleep(http.poll_wait(job_id, job.state, timeout, deadline, poll_s))

    def _follow(self, job_id: str, last_event_id: str | None) -> Iterator[Event]:
        follow = EventFollow(job_id, last_event_id, self.retries, self.reconnect_s, self.api_url)
        while True:
            try:
                with self._stream(calls.streamed(follow.path, follow.connecting())) as answer:
                    for line in answer.iter_lines():
                        event = follow.feed(line)
                        if event is not None:
                            yield event
                            if event.is_terminal:
                                return
                if self._call(calls.get_job(job_id)).is_terminal():
                    return
            except httpx.ReadTimeout:
                continue  # a quiet stream, not a broken one: reopen at once
            except (httpx.TransportError, ConnectionFailed) as exc:
                self._backoff(*follow.failed(exc))
                continue
            self._backoff(*follow.closed())

    def _download(self, download: Download, progress: http.ProgressCallback | None) -> Path:
        while True:
            try:
                with self._download_stream(download.url, download.headers()) as (answer, etag):
                    if not download.begin(answer, etag):
                        continue
                    with download.part.open("ab") as out:
                        for chunk in answer.iter_bytes():
                            download.write(out, chunk, progress)
                break
            except httpx.TransportError as exc:
                self._backoff(*download.failed(exc))
        return download.finish()

    @contextmanager
    def _stream(self, call: Call[None], ok: tuple[int, ...] = ()) -> Iterator[httpx.Response]:
        response = self._send(call, stream=True, ok=ok)
        try:
            yield response
        finally:
            response.close()

    @contextmanager
    def _download_stream(
        self, url: str, headers: dict[str, str]
    ) -> Iterator[tuple[httpx.Response, str | None]]:
        """(the response carrying the bytes, the sha256 ETag the API announced)."""
        with self._stream(calls.streamed(url, headers), ok=(416,)) as response:
            etag, redirect = response.headers.get("ETag"), redirect_to_store(response, headers)
            if redirect is None:
                yield response, etag
                return
        location, store_headers = redirect
        with httpx.Client(timeout=self._http.timeout) as plain:
            with plain.stream("GET", location, headers=store_headers) as redirected:
                if redirected.is_error and redirected.status_code != 416:
                    redirected.read()
                    raise api_error_from_response(redirected)
                yield redirected, etag

    def _send(
        self, call: Call[Any], *, stream: bool = False, ok: tuple[int, ...] = ()
    ) -> httpx.Response:
        """Send one request, retrying when it is safe; raise ApiError on an error status
        (but those in `ok`)."""
        retries = RequestRetries(call.method, call.retry, self.retries, self.api_url)
        while True:
            try:
                request = self._http.build_request(call.method, call.path, **call.options())
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                self._backoff(*retries.after_error(exc))
                continue
            again = retries.after_answer(response)
            if again is not None:
                response.close()
                self._backoff(*again)
                continue
            if response.is_error and response.status_code not in ok:
                try:
                    response.read()
                finally:
                    response.close()
                raise api_error_from_response(response)
            return response

    def _backoff(self, attempt: int, server_ms: int | None = None) -> None:
        delay = http.backoff_delay(self.backoff_s, attempt, server_ms)
        if delay > 0:
            time.sleep(delay)


class AsyncTransport:
    """`AsyncClient`'s plumbing, as `SyncTransport`'s, awaited."""

    api_url: str
    retries: int
    backoff_s: float
    reconnect_s: float
    _http: httpx.AsyncClient

    async def _call(self, call: Call[T]) -> T:
        return call.read(http.json_body(await self._send(call)))

    async def _wait_for(self, job_id: str, timeout: float | None, poll_s: float) -> Job:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = await self._call(calls.get_job(job_id))
            if job.is_terminal():
                return job
            job_id = job.id  # a prefix or a name, resolved once
            await asyncio.sleep(http.poll_wait(job_id, job.state, timeout, deadline, poll_s))

    async def _follow(self, job_id: str, last_event_id: str | None) -> AsyncGenerator[Event, None]:
        follow = EventFollow(job_id, last_event_id, self.retries, self.reconnect_s, self.api_url)
        while True:
            try:
                async with self._stream(calls.streamed(follow.path, follow.connecting())) as answer:
                    async for line in answer.aiter_lines():
                        event = follow.feed(line)
                        if event is not None:
                            yield event
                            if event.is_terminal:
                                return
                if (await self._call(calls.get_job(job_id))).is_terminal():
                    return
            except httpx.ReadTimeout:
                continue
            except (httpx.TransportError, ConnectionFailed) as exc:
                await self._backoff(*follow.failed(exc))
                continue
            await self._backoff(*follow.closed())

    async def _download(self, download: Download, progress: http.ProgressCallback | None) -> Path:
        while True:
            try:
                async with self._download_stream(download.url, download.headers()) as (
                    answer,
                    etag,
                ):
                    if not download.begin(answer, etag):
                        continue
                    with download.part.open("ab") as out:
                        async for chunk in answer.aiter_bytes():
                            download.write(out, chunk, progress)
                break
            except httpx.TransportError as exc:
                await self._backoff(*download.failed(exc))
        return download.finish()

    @asynccontextmanager
    async def _stream(
        self, call: Call[None], ok: tuple[int, ...] = ()
    ) -> AsyncIterator[httpx.Response]:
        response = await self._send(call, stream=True, ok=ok)
        try:
            yield response
        finally:
            await response.aclose()

    @asynccontextmanager
    async def _download_stream(
        self, url: str, headers: dict[str, str]
    ) -> AsyncIterator[tuple[httpx.Response, str | None]]:
        async with self._stream(calls.streamed(url, headers), ok=(416,)) as response:
            etag, redirect = response.headers.get("ETag"), redirect_to_store(response, headers)
            if redirect is None:
                yield response, etag
                return
        location, store_headers = redirect
        async with httpx.AsyncClient(timeout=self._http.timeout) as plain:
            async with plain.stream("GET", location, headers=store_headers) as redirected:
                if redirected.is_error and redirected.status_code != 416:
                    await redirected.aread()
                    raise api_error_from_response(redirected)
                yield redirected, etag

    async def _send(
        self, call: Call[Any], *, stream: bool = False, ok: tuple[int, ...] = ()
    ) -> httpx.Response:
        retries = RequestRetries(call.method, call.retry, self.retries, self.api_url)
        while True:
            try:
                request = self._http.build_request(call.method, call.path, **call.options())
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                await self._backoff(*retries.after_error(exc))
                continue
            again = retries.after_answer(response)
            if again is not None:
                await response.aclose()
                await self._backoff(*again)
                continue
            if response.is_error and response.status_code not in ok:
                try:
                    await response.aread()
                finally:
                    await response.aclose()
                raise api_error_from_response(response)
            return response

    async def _backoff(self, attempt: int, server_ms: int | None = None) -> None:
        delay = http.backoff_delay(self.backoff_s, attempt, server_ms)
        if delay > 0:
            await asyncio.sleep(delay)
