"""A job's warnings in a real database (SQLite and PostgreSQL), written with the end of its
attempts as the worker writes them (worker.attempt_end), read back by the API."""

from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from jobs.spec import JobSpec
from jobs.states import AttemptRef, ExitReason, JobState
from service import records
from service.db import session_scope
from service.models import Job
from service.records.job_warnings import MAX_WARNING_CHARS, MAX_WARNINGS
from worker.attempt_end import record_outcome
from worker.outcome import Outcome


def take(engine: Engine, job_id: str, attempt: int) -> None:
    with session_scope(engine) as session:
        assert records.take_job(session, job_id, attempt) is not None


def warnings_of(engine: Engine, job_id: str) -> list[str]:
    with session_scope(engine) as session:
        job = session.get(Job, job_id)
        assert job is not None
        return list(job.warnings)


def end(engine: Engine, job_id: str, attempt: int, state: JobState, *warnings: str) -> bool:
    reason = ExitReason.COMPLETED if state is JobState.SUCCEEDED else ExitReason.HANG
    outcome = Outcome(state, reason, None, None, warnings=warnings)
    return record_outcome(engine, AttemptRef(job_id, attempt), outcome).recorded


def test_warnings_are_kept_with_the_outcome_of_each_attempt(
    engine: Engine, api: TestClient
) -> None:
    spec = JobSpec(name="w", recipe="synthetic", max_retries=1)
    with session_scope(engine) as session:
        job_id = records.create_job(session, spec).id
    assert api.get(f"/v1/jobs/{job_id}").json()["warnings"] == []

    take(engine, job_id, 1)
    with session_scope(engine) as session:  # what the worker of another attempt says: nothing
        assert not records.add_job_warnings(session, job_id, 2, ["late"])
    with session_scope(engine) as session:  # the attempt fails and is retried
        assert records.add_job_warnings(session, job_id, 1, ["ranks never trained as one group"])
        failed = records.end_attempt(
            session, job_id, 1, JobState.FAILED, exit_reason=ExitReason.HANG
        )
        assert records.commit_end(session, failed).retried is not None
    take(engine, job_id, 2)
    assert end(engine, job_id, 2, JobState.SUCCEEDED, "recorded nothing", "recorded nothing")
    assert warnings_of(engine, job_id) == [
        "ranks never trained as one group",
        "attempt 2: recorded nothing",
    ]
    body = api.get(f"/v1/jobs/{job_id}").json()
    assert (body["state"], body["warnings"]) == ("succeeded", warnings_of(engine, job_id))
    listed = api.get("/v1/jobs").json()["items"]
    assert listed[0]["warnings"] == body["warnings"]
    # Ended: nothing more is added.
    assert not end(engine, job_id, 2, JobState.SUCCEEDED, "another")
    assert warnings_of(engine, job_id) == body["warnings"]


def test_a_flood_of_warnings_is_bounded(engine: Engine) -> None:
    spec = JobSpec(name="flood", recipe="synthetic")
    with session_scope(engine) as session:
        job_id = records.create_job(session, spec).id
    take(engine, job_id, 1)
    flood = [f"warning {i} " + "x" * 10_000 for i in range(500)]
    with session_scope(engine) as session:
        assert records.add_job_warnings(session, job_id, 1, flood[:100])
        session.commit()
    assert end(engine, job_id, 1, JobState.SUCCEEDED, *flood[100:])
    kept = warnings_of(engine, job_id)
    assert len(kept) == MAX_WARNINGS and all(len(w) <= MAX_WARNING_CHARS for w in kept)
    assert kept[0].startswith("warning 0 ") and kept[-1] == "... and 481 more warning(s) not kept"
