"""A job's page in bounded time: charts downsampled on the server from rollups, the logs' tail
paged backwards, the per-job log cap and the retention of old jobs' outputs (real databases)."""

import math
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from jobs.states import ExitReason, JobState
from service import records
from service.models import Job, LogLine, MetricPoint, MetricRollup, utcnow
from service.records.metric_rollups import WIDTHS, downsample
from service.retention import prune_outputs
from service.settings import Settings
from tests.support.registry import running_job


def write_series(engine: Engine, job_id: str, steps: int, spike_at: int) -> None:
    """`loss` and `lr` every step, with log lines between; `loss` has one spike up and one
    down, which a downsampled chart must keep."""
    with Session(engine) as session:
        for first in range(0, steps, 500):
            points = []
            for step in range(first, min(first + 500, steps)):
                loss = 1.0 + math.sin(step / 50) / 10
                if step == spike_at:
                    loss = 50.0
                if step == spike_at + 7:
                    loss = -50.0
                points += [
                    records.NewMetricPoint(step, 0, "loss", loss, float(step)),
                    records.NewMetricPoint(step, 0, "lr", 0.1, float(step)),
                ]
            logs = [records.NewLogLine(0, float(first), f"line {first + i}") for i in range(3)]
            records.append_output(session, job_id, 1, logs=logs, points=points)


def test_metrics_downsampled_keep_every_spike_and_at_most_max_points(
    api: TestClient, engine: Engine
) -> None:
    job_id = running_job(engine)
    write_series(engine, job_id, steps=1500, spike_at=1234)
    body = api.get(f"/v1/jobs/{job_id}/metrics", params={"max_points": 100}).json()
    by_name: dict[str, list[dict[str, Any]]] = {}
    for point in body["items"]:
        by_name.setdefault(point["name"], []).append(point)
    assert set(by_name) == {"loss", "lr"}
    assert all(2 <= len(points) <= 100 for points in by_name.values())
    loss = by_name["loss"]
    assert {p["step"] for p in loss if abs(p["value"]) == 50.0} == {1234, 1241}
    assert [p["seq"] for p in body["items"]] == sorted(p["seq"] for p in body["items"])
    with Session(engine) as session:
        last_seq = session.exec(select(Job.last_seq).where(Job.id == job_id)).one()
    assert body["next_after"] == last_seq
    # Each point is a real point, as GET /metrics pages it.
    page = api.get(
        f"/v1/jobs/{job_id}/metrics", params={"name": "loss", "after": loss[0]["seq"] - 1}
    ).json()
    assert page["items"][0] == loss[0]
    # A series that fits is answered whole.
    whole = api.get(f"/v1/jobs/{job_id}/metrics", params={"name": "lr", "max_points": 5000})
    assert len(whole.json()["items"]) == 1500


def test_a_zoomed_range_is_downsampled_finer_than_the_whole_series(
    api: TestClient, engine: Engine
) -> None:
    """`after` and `until` with `max_points` (a chart zoomed to a range): only points of the
    range, at most max_points, the range's spikes kept, and far denser than the whole series'
    chart there; from the rollups for a wide range, from the points for a narrow one."""
    job_id = running_job(engine)
    write_series(engine, job_id, steps=6000, spike_at=4321)
    url = f"/v1/jobs/{job_id}/metrics"
    whole = api.get(url, params={"name": "loss", "max_points": 100}).json()["items"]
    with Session(engine) as session:
        last_seq = session.get_one(Job, job_id).last_seq
        spike = session.exec(
            select(MetricPoint.seq).where(MetricPoint.job_id == job_id, MetricPoint.value == 50.0)
        ).one()
    for span in (3000, 600):  # seqs: rollups of 64 seqs, then the points themselves
        first, last = spike - span // 2, spike + span // 2
        shown = [p for p in whole if first < p["seq"] <= last]
        params = {"name": "loss", "max_points": 100, "after": first, "until": last}
        body = api.get(url, params=params).json()
        zoomed = body["items"]
        assert all(first < p["seq"] <= last for p in zoomed)
        assert 40 <= len(zoomed) <= 100 and len(zoomed) > 4 * len(shown), (span, len(shown))
        assert {50.0, -50.0} <= {p["value"] for p in zoomed}
        assert body["next_after"] == last_seq  # follow the stream from the job's end
        with Session(engine) as session:
            chart = downsample(session, job_id, "loss", after=first, last_seq=last, max_points=100)
            assert [p.seq for p in chart] == [p["seq"] for p in zoomed]
            session.execute(MetricRollup.__table__.delete())  # type: ignore[attr-defined]
            scanned = downsample(
                session, job_id, "loss", after=first, last_seq=last, max_points=100
            )
            assert all(first < p.seq <= last for p in scanned) and len(scanned) <= 100
            assert {50.0, -50.0} <= {p.value for p in scanned}
            session.rollback()
    # A range that fits is answered whole; a range past the job's end is empty.
    params = {"name": "loss", "max_points": 100, "after": spike, "until": spike + 40}
    seqs = [p["seq"] for p in api.get(url, params=params).json()["items"]]
    assert len(seqs) == 20 and all(spike < seq <= spike + 40 for seq in seqs)  # loss, lr, ...
    past = api.get(url, params={"max_points": 100, "after": 10**9, "until": 10**9 + 1})
    assert past.json()["items"] == []


def test_rollups_answer_as_a_scan_of_every_point_would(engine: Engine) -> None:
    """The rollups kept as points are written give the extremes a full scan finds."""
    job_id = running_job(engine)
    write_series(engine, job_id, steps=1000, spike_at=777)
    with Session(engine) as session:
        last_seq = session.exec(select(Job.last_seq).where(Job.id == job_id)).one()
        fast = downsample(session, job_id, "loss", last_seq=last_seq, max_points=64)
        every = session.exec(
            select(MetricPoint).where(MetricPoint.job_id == job_id, MetricPoint.name == "loss")
        ).all()
        assert max(p.value for p in fast) == max(p.value for p in every)
        assert min(p.value for p in fast) == min(p.value for p in every)
        assert len(fast) <= 64
        # Points stored without rollups (before they were kept) are bucketed by a scan.
        session.execute(MetricRollup.__table__.delete())  # type: ignore[attr-defined]
        scanned = downsample(session, job_id, "loss", last_seq=last_seq, max_points=64)
        assert len(scanned) <= 64 and {50.0, -50.0} <= {p.value for p in scanned}
        session.rollback()


def test_rollups_keep_each_extreme_whole_as_its_point_was_written(engine: Engine) -> None:
    """Every rollup row, at every width, holds its bucket's smallest and largest point (the
    first of equals) with that point's own step, epoch, ts and attempt, though buckets span
    the writer's batches."""
    job_id = running_job(engine)
    write_series(engine, job_id, steps=1300, spike_at=345)
    with Session(engine) as session:
        points = session.exec(select(MetricPoint).where(MetricPoint.job_id == job_id)).all()
        rollups = session.exec(select(MetricRollup).where(MetricRollup.job_id == job_id)).all()
    assert {r.width for r in rollups} == set(WIDTHS)
    for row in rollups:
        own = [p for p in points if p.name == row.name and p.seq // row.width == row.bucket]
        low = min(own, key=lambda p: (p.value, p.seq))
        high = max(own, key=lambda p: (p.value, -p.seq))
        for end, point in (("min", low), ("max", high)):
            kept = {f: getattr(row, f"{end}_{f}") for f in EXTREME}
            assert kept == {f: getattr(point, f) for f in EXTREME}, (row, end)
    assert len(rollups) == len({(p.name, w, p.seq // w) for p in points for w in WIDTHS})


EXTREME = ("value", "seq", "step", "epoch", "ts", "attempt")


def test_a_chart_reads_no_point_rows_beyond_its_size_check(api: TestClient, engine: Engine) -> None:
    """A downsampled chart reads the rollups alone (one count on the points' index decides
    that the series does not fit), and its points are the raw points, field for field."""
    job_id = running_job(engine)
    write_series(engine, job_id, steps=1500, spike_at=1234)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    with Session(engine) as session:
        last_seq = session.exec(select(Job.last_seq).where(Job.id == job_id)).one()
        event.listen(engine, "before_cursor_execute", record)
        try:
            chart = downsample(session, job_id, "loss", last_seq=last_seq, max_points=100)
        finally:
            event.remove(engine, "before_cursor_execute", record)
        raw = {
            p.seq: p
            for p in session.exec(
                select(MetricPoint).where(MetricPoint.job_id == job_id, MetricPoint.name == "loss")
            ).all()
        }
    assert len(statements) == 2, statements
    assert sum("metric_point" in s for s in statements) == 1
    assert "count(" in next(s for s in statements if "metric_point" in s).lower()
    assert 50 <= len(chart) <= 100 and {50.0, -50.0} <= {p.value for p in chart}
    for point in chart:
        row = raw[point.seq]
        assert tuple(point) == (
            row.seq,
            row.step,
            row.epoch,
            row.name,
            row.value,
            row.ts,
            row.attempt,
        )
    # Over HTTP: the same points, as `GET …/metrics` pages them.
    body = api.get(f"/v1/jobs/{job_id}/metrics", params={"name": "loss", "max_points": 100}).json()
    assert [p["seq"] for p in body["items"]] == [p.seq for p in chart]
    paged = api.get(f"/v1/jobs/{job_id}/metrics", params={"name": "loss", "limit": 2000})
    by_seq = {p["seq"]: p for p in paged.json()["items"]}
    assert body["items"] == [by_seq[p["seq"]] for p in body["items"]]


BAD_MAX_POINTS: list[tuple[dict[str, Any], int]] = [
    ({"max_points": 1}, 422),
    ({"max_points": 10_001}, 422),
    ({"max_points": "lots"}, 422),
    ({"max_points": 2**63}, 422),
    ({"max_points": 10, "after": 5, "until": 5}, 400),
    ({"max_points": 10, "until": -1}, 422),
    ({"until": 5}, 400),
]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_bad_max_points_get_the_error_body(api: TestClient, engine: Engine) -> None:
    job_id = running_job(engine)
    for params, status in BAD_MAX_POINTS:
        response = api.get(f"/v1/jobs/{job_id}/metrics", params=params)
        assert response.status_code == status, params
        assert set(response.json()["error"]) == {"code", "message", "detail"}


def test_logs_tail_newest_first_then_older_pages_cover_every_line_once(
    api: TestClient, engine: Engine
) -> None:
    job_id = running_job(engine)
    with Session(engine) as session:
        for batch in range(5):
            lines = [records.NewLogLine(i % 2, 0.0, f"b{batch} l{i}") for i in range(7)]
            records.append_log_lines(session, job_id, 1, lines)
        last_seq = session.exec(select(Job.last_seq).where(Job.id == job_id)).one()
    path = f"/v1/jobs/{job_id}/logs"
    tail = api.get(path, params={"order": "desc", "limit": 10}).json()
    assert [i["line"] for i in tail["items"][:2]] == ["b4 l6", "b4 l5"]
    assert tail["next_after"] == last_seq
    seen = [i["seq"] for i in tail["items"]]
    before = tail["next_before"]
    while before is not None:
        page = api.get(path, params={"order": "desc", "limit": 10, "before": before}).json()
        seen += [i["seq"] for i in page["items"]]
        before = page.get("next_before")
    forward = api.get(path).json()
    assert seen == sorted((i["seq"] for i in forward["items"]), reverse=True)
    assert len(seen) == 35
    # The default order and body are as they were.
    assert set(forward) == {"items", "next_after"}
    rank1 = api.get(path, params={"order": "desc", "rank": 1, "limit": 1000}).json()
    assert {i["rank"] for i in rank1["items"]} == {1} and "next_before" not in rank1
    for bad in ({"order": "sideways"}, {"before": 0}, {"before": "x"}, {"order": "desc;--"}):
        response = api.get(path, params=bad)
        assert response.status_code == 422, bad
        assert response.json()["error"]["code"]


def test_past_the_log_cap_lines_are_counted_not_stored(engine: Engine, api: TestClient) -> None:
    job_id = running_job(engine)
    cap = 1000
    with Session(engine) as session:
        for batch in range(4):
            lines = [records.NewLogLine(0, 0.0, f"{batch:02d}" + "x" * 98) for _ in range(4)]
            records.append_output(session, job_id, 1, logs=lines, max_log_bytes=cap)
        # Metric points still go in past the log cap.
        records.append_output(
            session,
            job_id,
            1,
            logs=[records.NewLogLine(0, 0.0, "y" * 100)],
            points=[records.NewMetricPoint(1, 0, "loss", 0.5, 0.0)],
            max_log_bytes=cap,
        )
        stored = session.exec(select(LogLine.line).where(LogLine.job_id == job_id)).all()
        job = session.get(Job, job_id)
        assert job is not None
    assert len(stored) == 11 and stored[-1].startswith("[launchbay] this job stored its limit")
    assert sum(len(line) for line in stored[:-1]) <= cap
    assert job.log_lines_dropped == 17 - 10
    body = api.get(f"/v1/jobs/{job_id}/logs").json()
    assert body["lines_dropped"] == job.log_lines_dropped
    assert api.get(f"/v1/jobs/{job_id}/metrics").json()["items"][0]["value"] == 0.5


def test_retention_deletes_old_finished_jobs_outputs_only(
    engine: Engine, settings: Settings
) -> None:
    old, recent, running = running_job(engine), running_job(engine), running_job(engine)
    with Session(engine) as session:
        for job_id in (old, recent, running):
            records.append_output(
                session,
                job_id,
                1,
                logs=[records.NewLogLine(0, 0.0, "hello")],
                points=[records.NewMetricPoint(1, 0, "loss", 0.5, 0.0)],
            )
        for job_id in (old, recent):
            records.transition_job(
                session, job_id, JobState.SUCCEEDED, attempt=1, exit_reason=ExitReason.COMPLETED
            )
        session.execute(
            update(Job).where(Job.id == old).values(finished_at=utcnow() - timedelta(days=10))  # type: ignore[arg-type]
        )
        session.commit()
    policy = settings.model_copy(update={"metrics_retention_days": 7, "logs_retention_days": 9})
    assert sorted(prune_outputs(engine, policy, utcnow())) == [old, old]
    assert prune_outputs(engine, policy, utcnow()) == []  # visited once
    with Session(engine) as session:
        for table in (MetricPoint, LogLine, MetricRollup):
            owners = set(session.exec(select(table.job_id)).all())  # type: ignore[attr-defined]
            assert owners == {recent, running}, table
        job = session.get(Job, old)
        assert job is not None and job.metrics_pruned_at and job.logs_pruned_at
        assert job.latest_metrics == {"loss": 0.5}
    # Deleting a job removes its rollups and tags too (foreign keys hold on PostgreSQL).
    with Session(engine) as session:
        records.delete_job_rows(session, recent)
        assert not session.exec(select(MetricRollup).where(MetricRollup.job_id == recent)).all()
