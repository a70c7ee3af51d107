"""The goodput ledger over HTTP (docs/goodput.md), on SQLite and PostgreSQL: jobs taken, run,
retried and ended through the store as the worker does it, their events' times set to a script
whose parts are known; a program whose events file is nonsense, ingested by the worker's own
ingestor; who may read whose; the period's sums; the refusals."""

import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.engine import Engine
from sqlmodel import Session

from jobs.contract.goodput import AttemptMarks
from jobs.spec import JobSpec
from jobs.states import AttemptRef, ExitReason, JobState
from service import records
from service.models import JobEvent
from worker.goodput_marks import AttemptMarker
from worker.ingest import Ingestor

REASON = "over quota: alice holds 8 of 8 device(s)"


def token(api: TestClient, name: str) -> dict[str, str]:
    created = api.post("/v1/tokens", json={"name": name, "role": "user"})
    assert created.status_code == 201, created.text
    return {"Authorization": f"Bearer {created.json()['token']}"}


def retime(session: Session, job_id: str, times: dict[int, float]) -> None:
    """Set the `ts` of the job's events by seq: the script's clock."""
    table = JobEvent.__table__  # type: ignore[attr-defined]
    for seq, ts in times.items():
        stmt = update(table).where(table.c.job_id == job_id, table.c.seq == seq).values(ts=ts)
        session.execute(stmt)
    session.commit()


def scripted_job(engine: Engine, owner: str, queue: str = "default") -> str:
    """Queued 10 s (over quota), a 5 s environment, a 3 s launch, 2 s to the first step, 20 s
    of training with a 2 s save whose checkpoint ended 5 s before the rank failed, 1 s of
    teardown; retried after 3 s in the queue, 3 s of launch, 1 s to the first step, 12 s of
    training, and its end now."""
    spec = JobSpec(name=f"{owner}-job", recipe="synthetic", nproc_per_node=2, max_retries=1)
    t0 = time.time() - 61.0
    with Session(engine, expire_on_commit=False) as session:
        job_id = records.create_job(
            session, spec.model_copy(update={"queue": queue}), owner=owner
        ).id
        records.show_queued(session.connection(), [records.QueuedShown(job_id, 1, 1, REASON)])
        session.commit()
        assert records.take_job(session, job_id, 1, worker="w1") is not None
        records.add_attempt_event(session, job_id, "environment", 1, {"seconds": 5.0})
        records.transition_job(session, job_id, JobState.RUNNING, attempt=1)
        first = AttemptMarks(
            first_step_at=t0 + 20,
            last_progress_at=t0 + 40,
            checkpoint_stall_s=2.0,
            checkpoint_saves=1,
            last_checkpoint_at=t0 + 35,
            ended_at=t0 + 40.5,
        )
        records.save_attempt_marks(session.connection(), job_id, 1, 0, first)
        retried = records.commit_end(
            session,
            records.end_attempt(
                session, job_id, 1, JobState.FAILED, exit_reason=ExitReason.USER_ERROR
            ),
        )
        assert retried.retried is not None
        assert records.take_job(session, job_id, 2, worker="w1") is not None
        records.transition_job(session, job_id, JobState.RUNNING, attempt=2)
        second = AttemptMarks(first_step_at=t0 + 48, last_progress_at=t0 + 60, ended_at=t0 + 60.2)
        records.save_attempt_marks(session.connection(), job_id, 2, 0, second)
        # seqs: 1 queued, 2 starting, 3 environment, 4 running, 5 queued again, 6 starting,
        # 7 running
        clock = {1: 0.0, 2: 10.0, 3: 16.0, 4: 18.0, 5: 41.0, 6: 44.0, 7: 47.0}
        retime(session, job_id, {seq: t0 + at for seq, at in clock.items()})
        records.commit_end(
            session,
            records.end_attempt(
                session, job_id, 2, JobState.SUCCEEDED, exit_reason=ExitReason.COMPLETED
            ),
        )
    return job_id


def seconds(body: dict[str, Any]) -> dict[str, float]:
    return {part["name"]: part["seconds"] for part in body["parts"]}


def assert_sound(body: dict[str, Any]) -> None:
    parts = body["parts"]
    assert all(p["seconds"] >= 0 and p["device_seconds"] >= 0 for p in parts)
    assert sum(p["seconds"] for p in parts) == body["wall_s"]
    assert sum(p["device_seconds"] for p in parts) == body["device_s"]


def test_a_retried_job_s_ledger_is_its_script_part_by_part(api: TestClient, engine: Engine) -> None:
    alice, bob = token(api, "alice"), token(api, "bob")
    job_id = scripted_job(engine, "alice")

    answer = api.get(f"/v1/jobs/{job_id}/goodput", headers=alice)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert list(body) == ["job_id", "final", "wall_s", "device_s", "goodput", "parts", "attempts"]
    assert_sound(body)
    parts = seconds(body)
    expected = {
        "queued": 10.0,
        "environment": 5.0,
        "launch": 6.0,
        "first_step": 3.0,
        "checkpoint_stall": 2.0,
        "lost_work": 5.0,
        "training": 13.0 + 12.0,
        "retry_gap": 3.0,
        "eval": 0.0,
        "hang": 0.0,
    }
    assert {name: round(parts[name], 1) for name in expected} == expected
    assert 1.5 < parts["teardown"] < 6.0  # 1 s, and the second attempt's end as it came
    assert body["final"] is True
    by_name = {part["name"]: part for part in body["parts"]}
    assert by_name["queued"]["detail"] == REASON and by_name["queued"]["device_seconds"] == 0
    assert by_name["training"]["device_seconds"] == 2 * parts["training"]
    assert body["goodput"] == round(2 * parts["training"] / body["device_s"], 6)
    assert [a["attempt"] for a in body["attempts"]] == [1, 2]
    for attempt in body["attempts"]:
        assert_sound(attempt)
    assert sum(a["wall_s"] for a in body["attempts"]) == body["wall_s"]

    # Another owner's job is not found, as everywhere; the admin reads it; a prefix names it.
    assert api.get(f"/v1/jobs/{job_id}/goodput", headers=bob).status_code == 404
    assert api.get(f"/v1/jobs/{job_id}/goodput").json() == body
    assert api.get(f"/v1/jobs/{job_id[:8]}/goodput", headers=alice).json() == body


def hostile_events(path: Path, start: float) -> int:
    """Nonsense a program may write; returns how many lines break the format."""
    lines: list[Any] = [
        {"type": "checkpoint_save", "start": start + 5, "end": start + 1},  # ends first
        {"type": "eval", "start": "yesterday", "end": 3},
        {"type": "eval", "start": -1e300, "end": 1e300},  # every second there is
        {"type": "checkpoint_save", "start": start - 1e9, "end": start + 1e12},
        {"type": "metric", "step": 1, "metrics": {"loss": 1.0}, "ts": -5.0},
    ]
    lines += [
        {"type": "checkpoint_save", "start": start + i % 5, "end": start + 7} for i in range(20_000)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return 2


def test_a_program_that_marks_nonsense_spoils_its_own_ledger_only(
    api: TestClient, engine: Engine, tmp_path: Path
) -> None:
    alice, mallory = token(api, "alice"), token(api, "mallory")
    honest = scripted_job(engine, "alice")
    before = api.get(f"/v1/jobs/{honest}/goodput", headers=alice).json()
    summary_before = api.get("/v1/goodput", headers=alice).json()

    with Session(engine, expire_on_commit=False) as session:
        spec = JobSpec(name="nonsense", recipe="synthetic", nproc_per_node=2)
        job_id = records.create_job(session, spec, owner="mallory").id
        records.take_job(session, job_id, 1, worker="w1")
        records.transition_job(session, job_id, JobState.RUNNING, attempt=1)
    events, logs = tmp_path / "events.jsonl", tmp_path / "logs"
    logs.mkdir()
    started = time.time()
    invalid = hostile_events(events, started)
    marker = AttemptMarker(started)
    ingestor = Ingestor(
        engine,
        AttemptRef(job_id, 1),
        log_dir=logs,
        events_file=events,
        max_line_bytes=4096,
        on_checkpoint=lambda _: None,
        marker=marker,
    )
    while not ingestor.poll(final=True) or ingestor.events_lines < 20_005:
        pass
    assert ingestor.invalid_events == invalid
    marker.stopped(time.time())
    ingestor.store_marks(final=True)
    with Session(engine) as session:
        records.commit_end(
            session,
            records.end_attempt(
                session, job_id, 1, JobState.SUCCEEDED, exit_reason=ExitReason.COMPLETED
            ),
        )

    body = api.get(f"/v1/jobs/{job_id}/goodput", headers=mallory).json()
    assert_sound(body)
    parts = seconds(body)
    assert parts["checkpoint_stall"] + parts["eval"] <= body["wall_s"]
    assert parts["training"] == 0.0  # its marks cover all its running span
    assert api.get(f"/v1/jobs/{honest}/goodput", headers=alice).json() == before
    assert api.get("/v1/goodput", headers=alice).json()["badput"] == summary_before["badput"]


def test_goodput_sums_up_each_owner_s_jobs_for_them_and_everyone_s_for_an_admin(
    api: TestClient, engine: Engine
) -> None:
    alice, bob = token(api, "alice"), token(api, "bob")
    mine = [scripted_job(engine, "alice"), scripted_job(engine, "alice", queue="gpu")]
    theirs = scripted_job(engine, "bob")
    with Session(engine) as session:  # alice's third job still waits
        spec = JobSpec(name="waits", recipe="synthetic")
        waiting = records.create_job(session, spec, owner="alice").id

    body = api.get("/v1/goodput", headers=alice).json()
    assert body["owner"] == "alice" and body["jobs"] == 3
    assert [o["owner"] for o in body["owners"]] == ["alice"]
    assert [b["name"] for b in body["badput"]] == [
        "queued",
        "environment",
        "launch",
        "first_step",
        "checkpoint_stall",
        "eval",
        "hang",
        "lost_work",
        "retry_gap",
        "teardown",
    ]
    lost = {b["name"]: b for b in body["badput"]}
    assert round(lost["lost_work"]["device_hours"] * 3600, 1) == 2 * 2 * 5.0
    assert lost["queued"]["device_hours"] == 0 and lost["queued"]["hours"] > 20 / 3600
    trained = body["trained_device_hours"]
    assert round(trained * 3600, 1) == 2 * 2 * 25.0
    assert body["goodput"] == pytest.approx(trained / body["device_hours"], abs=1e-4)
    assert body["badput_device_hours"] + trained == pytest.approx(body["device_hours"], abs=1e-5)
    assert {j["job_id"] for j in body["lost_most"]} == {*mine, waiting}
    assert body["lost_most"][-1]["job_id"] == waiting  # it held nothing yet

    by_queue = api.get("/v1/goodput", headers=alice, params={"queue": "gpu"}).json()
    assert by_queue["jobs"] == 1 and by_queue["lost_most"][0]["job_id"] == mine[1]
    everyone = api.get("/v1/goodput", params={"since": "1d", "top": 1}).json()
    assert everyone["owner"] is None and everyone["jobs"] == 4
    assert {o["owner"] for o in everyone["owners"]} == {"alice", "bob"}
    assert len(everyone["lost_most"]) == 1
    bobs = api.get("/v1/goodput", params={"owner": "bob"}).json()
    assert bobs["jobs"] == 1 and bobs["lost_most"][0]["job_id"] == theirs
    # A period that ended before the jobs did holds none of them.
    past = api.get("/v1/goodput", params={"since": "2020-01-01", "until": "2020-02-01T00:00Z"})
    assert past.status_code == 200 and past.json()["jobs"] == 0

    refused = api.get("/v1/goodput", headers=alice, params={"owner": "bob"})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    backwards = api.get("/v1/goodput", params={"since": "2026-02-01", "until": "2026-01-01"})
    assert backwards.status_code == 422
    assert backwards.json()["error"]["code"] == "validation_error"
    assert set(backwards.json()["error"]["detail"]) == {"since", "until"}
    for bad in ({"since": "last tuesday"}, {"until": "2026-13-45"}, {"top": "0"}):
        answer = api.get("/v1/goodput", headers=bob, params=bad)
        assert answer.status_code == 422, (bad, answer.text)
        assert set(answer.json()["error"]) == {"code", "message", "detail"}

    text = api.get("/metrics").text
    assert 'launchbay_goodput_device_seconds_total{part="queued"} 0.0' in text
    assert "launchbay_goodput_jobs_total 3" in text
    line = next(ln for ln in text.splitlines() if 'seconds_total{part="lost_work"}' in ln)
    assert round(float(line.split()[-1]), 1) == 3 * 5.0
