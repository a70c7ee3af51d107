"""Metrics, the event stream and checkpoint downloads, read back from a real database."""

import hashlib
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from service import records
from service.db import make_engine
from service.models import Checkpoint
from service.settings import Settings


def finished_job(
    settings: Settings,
    checkpoints: int = 0,
    best_metric: str | None = None,
    retire: Sequence[str] = (),
) -> str:
    """A job with two metric points per step, log lines of two ranks and some checkpoints, of
    which those named in `retire` were retired (as retention does) before the job ended."""
    spec = JobSpec(
        name="done", recipe="synthetic", checkpoint={"best_metric": best_metric, "best_mode": "max"}
    )
    engine = make_engine(settings.resolved_database_url)
    with Session(engine, expire_on_commit=False) as session:
        job = records.create_job(session, spec)
        records.transition_job(session, job.id, JobState.STARTING, attempt=1)
        records.transition_job(session, job.id, JobState.RUNNING, attempt=1)
        for step in range(1, 6):
            records.append_metric_points(
                session,
                job.id,
                1,
                [
                    records.NewMetricPoint(step, 0, "loss", 1.0 / step, time.time()),
                    records.NewMetricPoint(step, 0, "accuracy", step / 10, time.time()),
                ],
            )
            records.append_log_lines(
                session,
                job.id,
                1,
                [
                    records.NewLogLine(rank, time.time(), f"rank {rank} step {step}")
                    for rank in (0, 1)
                ],
            )
        folder = settings.checkpoints_dir / job.id
        folder.mkdir(parents=True)
        for i in range(checkpoints):
            data = bytes(range(256)) * (4096 * (i + 1))
            (folder / f"step-{i}.pt").write_bytes(data)
            session.add(
                Checkpoint(
                    id=f"ck{i}",
                    job_id=job.id,
                    seq=records.allocate_seq(session, job.id),
                    attempt=1,
                    step=i,
                    epoch=0,
                    metrics={"accuracy": [0.5, 0.9, 0.7][i % 3]},
                    size=len(data),
                    sha256=hashlib.sha256(data).hexdigest(),
                    path=f"checkpoints/{job.id}/step-{i}.pt",
                )
            )
            session.commit()
        records.delete_checkpoints(session, job.id, 1, retire)
        records.transition_job(
            session,
            job.id,
            JobState.SUCCEEDED,
            attempt=1,
            exit_code=0,
            exit_reason=ExitReason.COMPLETED,
        )
    engine.dispose()
    return job.id


def test_metrics_page_by_seq_and_filter_by_name(api: TestClient, settings: Settings) -> None:
    job_id = finished_job(settings)
    everything = api.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
    assert len(everything) == 10
    seqs = [p["seq"] for p in everything]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10
    assert set(everything[0]) >= {"seq", "step", "epoch", "name", "value", "ts"}
    pages, after = [], 0
    while True:
        page = api.get(
            f"/v1/jobs/{job_id}/metrics", params={"name": "loss", "after": after, "limit": 2}
        ).json()
        if not page["items"]:
            break
        pages.extend(page["items"])
        after = page["next_after"]
    assert [p["step"] for p in pages] == [1, 2, 3, 4, 5]
    assert all(p["name"] == "loss" for p in pages)
    job = api.get(f"/v1/jobs/{job_id}").json()
    assert job["latest_metrics"] == {"loss": 0.2, "accuracy": 0.5}
    assert job["progress"]["step"] == 5


def test_logs_filter_by_rank(api: TestClient, settings: Settings) -> None:
    job_id = finished_job(settings)
    rank1 = api.get(f"/v1/jobs/{job_id}/logs", params={"rank": 1}).json()["items"]
    assert [line["line"] for line in rank1] == [f"rank 1 step {s}" for s in range(1, 6)]


def read_sse(
    api: TestClient,
    job_id: str,
    headers: dict[str, str] | None = None,
    stop_after: int | None = None,
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    with api.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers or {}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                if "id" in current:
                    events.append(current)
                    if stop_after is not None and len(events) == stop_after:
                        break
                current = {}
                continue
            field, _, value = line.partition(":")
            current[field] = value.strip()
    return events


def test_event_stream_replays_a_finished_job_and_resumes(
    api: TestClient, settings: Settings
) -> None:
    job_id = finished_job(settings, checkpoints=1)
    full = read_sse(api, job_id)
    kinds = [e["event"] for e in full]
    assert kinds[0] == "state" and kinds[-1] == "state"
    assert json.loads(full[-1]["data"])["state"] == "succeeded"
    assert kinds.count("metric") == 10 and kinds.count("log") == 10
    assert kinds.count("checkpoint") == 1
    ids = [int(e["id"]) for e in full]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    first = read_sse(api, job_id, stop_after=7)
    rest = read_sse(api, job_id, headers={"Last-Event-ID": first[-1]["id"]})
    assert [e["id"] for e in first + rest] == [e["id"] for e in full]


def test_checkpoint_download_etag_range_and_refs(
    api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    job_id = finished_job(settings, checkpoints=3, best_metric="accuracy")
    items = api.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    assert [c["id"] for c in items] == ["ck0", "ck1", "ck2"]
    full = api.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
    assert full.status_code == 200
    assert full.headers["etag"].strip('"') == hashlib.sha256(full.content).hexdigest()
    assert full.headers["etag"].strip('"') == items[2]["sha256"]
    assert int(full.headers["content-length"]) == items[2]["size"]
    assert "attachment" in full.headers["content-disposition"]
    best = api.get(f"/v1/jobs/{job_id}/checkpoints/best/download")
    assert best.headers["etag"].strip('"') == items[1]["sha256"]
    part = api.get(
        f"/v1/jobs/{job_id}/checkpoints/ck2/download", headers={"Range": "bytes=1000-1999"}
    )
    assert part.status_code == 206
    assert part.content == full.content[1000:2000]
    assert part.headers["content-range"] == f"bytes 1000-1999/{len(full.content)}"
    for bad_ref in ("nope", "..", "..%2F..%2Fetc%2Fpasswd"):
        response = api.get(f"/v1/jobs/{job_id}/checkpoints/{bad_ref}/download")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    bad_range = api.get(
        f"/v1/jobs/{job_id}/checkpoints/latest/download", headers={"Range": "bytes=oops"}
    )
    assert bad_range.status_code == 400 and bad_range.json()["error"]["code"] == "invalid_range"
    past_end = api.get(
        f"/v1/jobs/{job_id}/checkpoints/latest/download", headers={"Range": f"bytes={10**9}-"}
    )
    assert past_end.status_code == 416


# accuracy 0.5, 0.9, 0.7, 0.5, 0.9 (best_mode max): ck1 and ck4 tie, and the latest wins;
# without a best_metric `best` is the latest; a metric none reported names no best.
@pytest.mark.parametrize(
    ("best_metric", "best_id"), [("accuracy", "ck4"), (None, "ck4"), ("val_acc", None)]
)
def test_the_listing_marks_the_checkpoint_best_and_latest_downloads_serve(
    api: TestClient, settings: Settings, best_metric: str | None, best_id: str | None
) -> None:
    job_id = finished_job(settings, checkpoints=5, best_metric=best_metric)
    items = api.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    marked = [c["id"] for c in items if c["best"]]
    assert marked == ([best_id] if best_id else [])
    assert [c["id"] for c in items if c["latest"]] == ["ck4"]
    sha = {c["id"]: c["sha256"] for c in items}
    best = api.get(f"/v1/jobs/{job_id}/checkpoints/best/download")
    if best_id is None:
        assert best.status_code == 404 and best.json()["error"]["code"] == "not_found"
    else:
        assert best.headers["etag"].strip('"') == sha[marked[0]]
    latest = api.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
    assert latest.headers["etag"].strip('"') == sha["ck4"]


def test_retired_checkpoints_stay_in_the_history_and_nowhere_else(
    api: TestClient, settings: Settings
) -> None:
    # ck1 is the best by accuracy (0.5, 0.9, 0.7); retention retired it and ck2.
    job_id = finished_job(settings, checkpoints=3, best_metric="accuracy", retire=["ck1", "ck2"])
    items = api.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    assert [c["id"] for c in items] == ["ck0"]
    for ref in ("latest", "best", "ck0"):
        response = api.get(f"/v1/jobs/{job_id}/checkpoints/{ref}/download")
        assert response.headers["etag"].strip('"') == items[0]["sha256"], ref
    for ref in ("ck1", "ck2"):
        response = api.get(f"/v1/jobs/{job_id}/checkpoints/{ref}/download")
        assert response.status_code == 404, ref
    events = read_sse(api, job_id)
    saved = [json.loads(e["data"])["id"] for e in events if e["event"] == "checkpoint"]
    retired = [json.loads(e["data"]) for e in events if e["event"] == "checkpoint_deleted"]
    assert saved == ["ck0", "ck1", "ck2"]
    assert [(r["id"], r["step"], r["attempt"]) for r in retired] == [("ck1", 1, 1), ("ck2", 2, 1)]
    ids = [int(e["id"]) for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert read_sse(api, job_id, headers={"Last-Event-ID": "0"}) == events


def test_a_checkpoint_pointing_outside_the_data_dir_is_never_served(
    api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    job_id = finished_job(settings)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    engine = make_engine(settings.resolved_database_url)
    with Session(engine) as session:
        session.add(
            Checkpoint(
                id="evil",
                job_id=job_id,
                seq=records.allocate_seq(session, job_id),
                attempt=1,
                size=9,
                sha256="0" * 64,
                path="../secret.txt",
            )
        )
        session.commit()
    engine.dispose()
    response = api.get(f"/v1/jobs/{job_id}/checkpoints/evil/download")
    assert response.status_code == 404
    assert "not yours" not in response.text
