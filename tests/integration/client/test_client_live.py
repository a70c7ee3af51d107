"""The SDK against a real API over HTTP: jobs, errors, paging, the event stream, downloads."""

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from client import ChecksumMismatch, Conflict, InvalidRequest, NotFound, Unauthorized
from jobs.states import ExitReason, JobState
from service import records
from tests.integration.client.conftest import LiveApi, StreamOpened, once

SPEC = {"name": "it-client", "recipe": "synthetic"}


class CuttingTransport(httpx.HTTPTransport):
    """A real transport that records each exchange; once armed, it cuts the next body short."""

    def __init__(self, cut_at: int | None = None) -> None:
        super().__init__()
        self.cut_at = cut_at
        self.exchanges: list[tuple[str | None, str | None, int]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        headers = request.headers
        self.exchanges.append((headers.get("Range"), headers.get("If-Range"), response.status_code))
        if self.cut_at is None:
            return response
        cut_at, self.cut_at = self.cut_at, None
        return httpx.Response(
            response.status_code, headers=response.headers, stream=_Cut(response, cut_at)
        )


class _Cut(httpx.SyncByteStream):
    def __init__(self, response: httpx.Response, limit: int) -> None:
        self.response, self.limit = response, limit

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        for chunk in self.response.stream:  # type: ignore[union-attr]
            chunk = chunk[: self.limit - sent]
            sent += len(chunk)
            if chunk:
                yield chunk
            if sent >= self.limit:
                break
        self.response.close()
        raise httpx.ReadError("connection reset by the test")


def test_job_lifecycle(live_api: LiveApi) -> None:
    with live_api.client() as lb:
        job = lb.submit_job(SPEC, idempotency_key="it-1")
        assert job.state == "queued"
        assert lb.submit_job(SPEC, idempotency_key="it-1").id == job.id
        with pytest.raises(Conflict) as reused:
            lb.submit_job({**SPEC, "name": "other"}, idempotency_key="it-1")
        assert reused.value.code == "idempotency_key_reused"
        assert reused.value.detail == {"job_id": job.id}

        page = lb.list_jobs(state="queued")
        assert [j.id for j in page.items] == [job.id]
        assert page.total == 1
        with pytest.raises(Conflict):
            lb.delete_job(job.id)

        assert lb.cancel_job(job.id).state == "cancelled"
        assert lb.wait_for_job(job.id, timeout=5).exit_reason == "cancelled"
        lb.delete_job(job.id)
        with pytest.raises(NotFound) as gone:
            lb.get_job(job.id)
        assert (gone.value.status, gone.value.code) == (404, "not_found")


def test_unknown_field_is_an_invalid_request(live_api: LiveApi) -> None:
    with live_api.client() as lb, pytest.raises(InvalidRequest) as caught:
        lb.submit_job({**SPEC, "gpus": 8})
    assert caught.value.status == 422
    assert caught.value.code == "validation_error"


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_a_missing_or_wrong_token_is_unauthorized(live_api: LiveApi, token: str | None) -> None:
    with live_api.client(token=token) as lb, pytest.raises(Unauthorized):
        lb.list_jobs()


def test_health_ready_and_recipes(live_api: LiveApi) -> None:
    with live_api.client() as lb:
        assert lb.get_health() == {"status": "ok"}
        assert lb.get_readiness()["status"] == "ready"
        assert "synthetic" in [r.name for r in lb.list_recipes()]


def test_metrics_and_logs_page_through_everything(live_api: LiveApi) -> None:
    with live_api.client() as lb:
        job_id = lb.submit_job(SPEC).id
        live_api.start(job_id)
        with live_api.worker_session() as session:
            for step in range(1, 13):
                points = [
                    records.NewMetricPoint(step, 0, "loss", 1 / step, time.time()),
                    records.NewMetricPoint(step, 0, "accuracy", step / 12, time.time()),
                ]
                records.append_metric_points(session, job_id, 1, points)
            lines = [records.NewLogLine(i % 2, time.time(), f"line {i}") for i in range(9)]
            records.append_log_lines(session, job_id, 1, lines)

        everything = list(lb.iter_metrics(job_id, page_size=5))
        assert len(everything) == 24
        assert [p.seq for p in everything] == sorted({p.seq for p in everything})
        losses = list(lb.iter_metrics(job_id, name="loss", page_size=5))
        assert [p.step for p in losses] == list(range(1, 13))
        rank1 = list(lb.iter_logs(job_id, rank=1, page_size=2))
        assert [item.line for item in rank1] == ["line 1", "line 3", "line 5", "line 7"]
        assert lb.get_job(job_id).latest_metrics == {"loss": 1 / 12, "accuracy": 1.0}


def test_events_follow_a_job_to_its_end_and_resume_without_gap(live_api: LiveApi) -> None:
    transport = StreamOpened()
    with live_api.client(transport=transport) as lb:
        job_id = lb.submit_job(SPEC).id
        live_api.start(job_id)
        with live_api.worker_session() as session:
            records.append_log_lines(session, job_id, 1, [records.NewLogLine(0, time.time(), "hi")])
            point = records.NewMetricPoint(1, 0, "loss", 0.5, time.time())
            records.append_metric_points(session, job_id, 1, [point])
        finishing = once(
            transport.opened,
            lambda: live_api.finish(
                job_id, JobState.SUCCEEDED, exit_code=0, exit_reason=ExitReason.COMPLETED
            ),
        )
        events = list(lb.stream_events(job_id))
        finishing.join()

        assert [e.event for e in events] == ["state", "state", "state", "log", "metric", "state"]
        assert [e.data.get("state") for e in events if e.event == "state"] == [
            "queued",
            "starting",
            "running",
            "succeeded",
        ]
        assert events[-1].is_terminal and events[-1].data["exit_reason"] == "completed"
        ids = [int(e.id or 0) for e in events]
        assert ids == sorted(set(ids))

        # A client that stops after three events and comes back with the last id.
        stream = lb.stream_events(job_id)
        first = [next(stream) for _ in range(3)]
        stream.close()
        rest = list(lb.stream_events(job_id, last_event_id=first[-1].id))
        assert first + rest == events


def test_download_resumes_with_range_and_if_range(live_api: LiveApi, tmp_path: Path) -> None:
    data = bytes(range(256)) * 12_288 + b"tail"  # 3 MiB and a bit
    transport = CuttingTransport()
    with live_api.client(transport=transport) as lb:
        job_id = lb.submit_job(SPEC).id
        live_api.start(job_id)
        live_api.add_checkpoint(job_id, data)
        transport.cut_at, transport.exchanges = 1_000_000, []
        target = lb.download_checkpoint(job_id, "latest", tmp_path / "model.pt")
    assert target.read_bytes() == data
    etag = f'"{hashlib.sha256(data).hexdigest()}"'
    assert transport.exchanges == [(None, None, 200), ("bytes=1000000-", etag, 206)]


def test_download_resumes_a_part_file_from_an_earlier_run(
    live_api: LiveApi, tmp_path: Path
) -> None:
    data = b"checkpoint bytes " * 100_000
    transport = CuttingTransport()
    with live_api.client(transport=transport) as lb:
        job_id = lb.submit_job(SPEC).id
        live_api.start(job_id)
        checkpoint_id = live_api.add_checkpoint(job_id, data)
        (tmp_path / "ck.pt.part").write_bytes(data[:4096])
        transport.exchanges = []
        lb.download_checkpoint(job_id, checkpoint_id, tmp_path / "ck.pt")
        assert lb.download_checkpoint(job_id, "best", tmp_path).read_bytes() == data
    assert (tmp_path / "ck.pt").read_bytes() == data
    assert transport.exchanges == [("bytes=4096-", None, 206), (None, None, 200)]


def test_download_of_a_corrupted_file_raises(live_api: LiveApi, tmp_path: Path) -> None:
    data = b"x" * 50_000
    with live_api.client() as lb:
        job_id = lb.submit_job(SPEC).id
        live_api.start(job_id)
        live_api.add_checkpoint(job_id, data, name="bad.pt")
        (live_api.settings.checkpoints_dir / job_id / "bad.pt").write_bytes(b"y" * 50_000)
        with pytest.raises(ChecksumMismatch) as caught:
            lb.download_checkpoint(job_id, "latest", tmp_path / "bad.pt")
    assert caught.value.expected == hashlib.sha256(data).hexdigest()
    assert not (tmp_path / "bad.pt").exists()
    assert not (tmp_path / "bad.pt.part").exists()
