"""Attempts the supervisor ends: a cancel (the job's `cancelling` state), timeout_s and
hang_timeout_s. In each, nothing of the job may be left running afterwards."""

import threading
import time

import pytest

from jobs.states import JobState
from service.db import session_scope
from service.records import transition_job
from tests.integration.worker.conftest import WorkerEnv, recorded_alive
from tests.support.procs import job_processes, wait_until
from worker.attempt import AttemptResult


def run_in_background(env: WorkerEnv, job_id: str) -> tuple[threading.Thread, list[AttemptResult]]:
    results: list[AttemptResult] = []
    thread = threading.Thread(target=lambda: results.append(env.run(job_id)), daemon=True)
    thread.start()
    return thread, results


def test_cancel_stops_every_process_within_the_grace(wenv: WorkerEnv) -> None:
    # Rank 1 ignores SIGTERM and every rank leaves a child in a session of its own: only the
    # recorded PIDs and SIGKILL can end them.
    args = ["--events-every", "0.2", "--ignore-sigterm-rank", "1", "--detached-child"]
    job_id = wenv.submit("sleeper.py", args=args)
    thread, results = run_in_background(wenv, job_id)
    # torchrun, two ranks, two detached children
    assert wait_until(lambda: len(job_processes(job_id)) >= 5, timeout=30), "never started"
    assert wait_until(lambda: wenv.job(job_id).state == "running", timeout=10)

    with session_scope(wenv.engine) as session:  # what the API does
        assert transition_job(session, job_id, JobState.CANCELLING)
    asked = time.monotonic()
    gone = wait_until(
        lambda: not job_processes(job_id) and not recorded_alive(wenv.settings.data_dir),
        timeout=15,
        interval=0.05,
    )
    took = time.monotonic() - asked
    assert gone
    thread.join(timeout=15)

    assert took <= wenv.settings.cancel_grace_s + 2, took
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("cancelled", "cancelled")
    [result] = results
    assert len(result.processes) >= 5 and not result.survivors
    assert any(line.line == "rank 1 sleeping" for line in wenv.logs(job_id))


def test_timeout_fails_the_job(wenv: WorkerEnv) -> None:
    # Long enough for the ranks to start and report on a loaded machine (torchrun alone takes
    # about 4 s to the first step), so that the stop comes after some events.
    job_id = wenv.submit("sleeper.py", args=["--events-every", "0.2"], timeout_s=8)
    started = time.monotonic()
    wenv.run(job_id)
    job = wenv.job(job_id)

    assert (job.state, job.exit_reason) == ("failed", "timeout")
    assert job.message == "stopped after timeout_s=8 s"
    assert 8 <= time.monotonic() - started < 8 + wenv.settings.cancel_grace_s + 5
    assert wenv.metrics(job_id), "rank 0's events were ingested until the stop"


def test_no_progress_is_a_hang(wenv: WorkerEnv) -> None:
    job_id = wenv.submit("sleeper.py", hang_timeout_s=2, timeout_s=60)
    wenv.run(job_id)
    job = wenv.job(job_id)

    assert (job.state, job.exit_reason) == ("failed", "hang")
    assert job.message == "stopped: no new event from rank 0 for hang_timeout_s=2 s"


def start_sleeper(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, threading.Thread, list[AttemptResult]]:
    monkeypatch.setattr(wenv.settings, "heartbeat_interval_s", 0.3)
    job_id = wenv.submit("sleeper.py", args=["--events-every", "0.2"])
    thread, results = run_in_background(wenv, job_id)
    assert wait_until(lambda: wenv.job(job_id).state == "running", timeout=30)
    return job_id, thread, results


def test_a_job_taken_away_is_stopped_and_left_as_it_is(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, thread, results = start_sleeper(wenv, monkeypatch)
    with session_scope(wenv.engine) as session:  # e.g. a reaper that thought the worker lost
        assert transition_job(
            session, job_id, JobState.FAILED, exit_reason="worker_lost", message="reaped"
        )
    thread.join(timeout=15)

    [result] = results
    assert result.outcome is None and not result.recorded
    job = wenv.job(job_id)
    assert (job.state, job.exit_reason, job.message) == ("failed", "worker_lost", "reaped")


def test_cancelling_state_cancels_even_without_the_key(
    wenv: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, thread, _ = start_sleeper(wenv, monkeypatch)
    with session_scope(wenv.engine) as session:
        assert transition_job(session, job_id, JobState.CANCELLING)
    thread.join(timeout=15)

    job = wenv.job(job_id)
    assert (job.state, job.exit_reason) == ("cancelled", "cancelled")
    assert job.last_heartbeat is not None
