"""A fake Launchbay API on httpx.MockTransport: queued answers per route, every request kept."""

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from client.sdk import Client

API_URL = "http://lb.test"
Answer = Callable[[httpx.Request], httpx.Response] | Exception


def reply(status: int = 200, json: Any = None, **kwargs: Any) -> Callable[..., httpx.Response]:
    """An answer made afresh for every request it serves."""
    return lambda request: httpx.Response(status, json=json, **kwargs)


def error_body(status: int, code: str, message: str, detail: Any = None) -> Callable[..., Any]:
    return reply(status, {"error": {"code": code, "message": message, "detail": detail}})


class BrokenStream(httpx.SyncByteStream):
    """A body that sends `data` and then loses the connection."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        if self.data:
            yield self.data
        raise httpx.RemoteProtocolError("peer closed connection without sending complete body")


class FakeApi:
    """Each route answers with its queued answers in turn; the last one repeats."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self._answers: dict[tuple[str, str], list[Answer]] = defaultdict(list)

    def on(self, method: str, path: str, *answers: Answer) -> "FakeApi":
        self._answers[(method, path)].extend(answers)
        return self

    def replace(self, method: str, path: str, *answers: Answer) -> "FakeApi":
        """Forget the route's answers so far; answer with these from now on."""
        self._answers[(method, path)] = list(answers)
        return self

    def sent(self, method: str, path: str) -> list[httpx.Request]:
        return [r for r in self.requests if r.method == method and r.url.path == path]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        queue = self._answers.get((request.method, request.url.path))
        if not queue:
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "no route"}})
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def lb(api: FakeApi) -> Iterator[Client]:
    with Client(API_URL, "secret", transport=api.transport, backoff_s=0) as client:
        yield client


def job(job_id: str = "j1", state: str = "running", **fields: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "name": "demo",
        "state": state,
        "attempt": 1,
        "spec": {"config": {"epochs": 2}},
        "progress": {"step": 10, "epoch": 0, "total_steps": 100, "eta_s": None},
        "latest_metrics": {"loss": 0.5},
        "created_at": "2024-01-01T00:00:00Z",
        "started_at": None,
        "finished_at": None,
        "exit_code": None,
        "exit_reason": None,
        "message": None,
        "worker": None,
        "queue_position": None,
        "pending_reason": None,
        "warnings": [],
        "launch_path": None,
        **fields,
    }


def metric_point(seq: int, name: str, value: float, step: int | None = None) -> dict[str, Any]:
    step = seq if step is None else step
    return {
        "seq": seq,
        "step": step,
        "epoch": 0,
        "name": name,
        "value": value,
        "ts": 1.0,
        "attempt": 1,
    }


def log_line(seq: int, line: str, rank: int = 0, node: int = 0) -> dict[str, Any]:
    return {"seq": seq, "rank": rank, "node": node, "ts": 1.0, "line": line}


def checkpoint(ckpt_id: str, step: int, **fields: Any) -> dict[str, Any]:
    return {
        "id": ckpt_id,
        "job_id": "j1",
        "attempt": 1,
        "step": step,
        "epoch": 0,
        "metrics": {},
        "size": 2048,
        "sha256": "ab" * 32,
        "path": f"checkpoints/j1/step-{step}.pt",
        "created_at": "2024-01-01T00:00:00Z",
        **fields,
    }


def worker_record(name: str = "w1", **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "host": "box",
        "pid": 7,
        "queues": ["default", "gpu8"],
        "devices": ["cpu:0", "cpu:1"],
        "state": "idle",
        "started_at": "2024-01-01T00:00:00Z",
        "last_heartbeat": "2024-01-01T00:00:00Z",
        "current_job": None,
        **fields,
    }
