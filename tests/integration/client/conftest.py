"""A real Launchbay API on a free port (uvicorn in a thread), over SQLite and a private Redis.

The tests drive it with the SDK and the CLI over HTTP; what a worker would record (states,
metrics, logs, checkpoints) they write with `service.records`, as the worker does.
"""

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlmodel import Session

from client import Client
from jobs.states import JobState
from service import records
from service.app import create_app
from service.db import make_engine, upgrade_database
from service.settings import Settings
from tests.support.procs import free_port, wait_until

ADMIN_TOKEN = "it-admin-token"


@dataclass
class LiveApi:
    url: str
    settings: Settings

    def client(
        self, token: str | None = ADMIN_TOKEN, transport: httpx.BaseTransport | None = None
    ) -> Client:
        return Client(self.url, token, transport=transport, backoff_s=0)

    @contextmanager
    def worker_session(self) -> Iterator[Session]:
        """A database session as the worker has one, to record what a job produced."""
        engine = make_engine(self.settings.resolved_database_url)
        try:
            with Session(engine, expire_on_commit=False) as session:
                yield session
        finally:
            engine.dispose()

    def start(self, job_id: str) -> None:
        with self.worker_session() as session:
            assert records.transition_job(session, job_id, JobState.STARTING, attempt=1)
            assert records.transition_job(session, job_id, JobState.RUNNING, attempt=1)

    def finish(self, job_id: str, state: JobState, **fields: object) -> None:
        with self.worker_session() as session:
            assert records.transition_job(session, job_id, state, attempt=1, **fields)

    def add_checkpoint(self, job_id: str, data: bytes, name: str = "step-1.pt") -> str:
        folder = self.settings.checkpoints_dir / job_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
        with self.worker_session() as session:
            checkpoint = records.register_checkpoint(
                session,
                job_id,
                1,
                path=f"checkpoints/{job_id}/{name}",
                step=1,
                epoch=0,
                metrics={"loss": 0.1},
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
            )
        return checkpoint.id


@pytest.fixture
def live_api(tmp_path: Path, redis_url: str) -> Iterator[LiveApi]:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    database_url = f"sqlite:///{data_dir / 'launchbay.db'}"
    upgrade_database(database_url)
    settings = Settings(
        data_dir=data_dir, database_url=database_url, redis_url=redis_url, admin_token=ADMIN_TOKEN
    )
    with serve_api(settings) as url:
        yield LiveApi(url=url, settings=settings)


@contextmanager
def serve_api(settings: Settings) -> Iterator[str]:
    """The app for `settings` on a free port (uvicorn in a thread); yields its URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="launchbay-api", daemon=True)
    thread.start()
    try:
        if not wait_until(lambda: server.started, timeout=30):
            raise RuntimeError("the API did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        assert not thread.is_alive(), "the API thread did not stop"


class StreamOpened(httpx.HTTPTransport):
    """The real transport, which also says once a job's event stream has answered: the moment
    a client is following the job."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.url.path.endswith("/events") and response.status_code == 200:
            self.opened.set()
        return response


def once(event: threading.Event, action: Callable[[], object]) -> threading.Thread:
    """Run `action()` in a thread once `event` is set: a worker acting while a client follows.
    If the event never comes, the action runs anyway after a minute so the follower ends."""

    def run() -> None:
        event.wait(60)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
