"""The goodput ledger (`jobs.contract.goodput`) over stored records built as the service stores
them (state and environment events, the worker's marks): scenarios whose parts are known from
their own clock, and records that make no sense, which still give parts that are never
negative and add up exactly to the wall time."""

import math
import random
from types import SimpleNamespace
from typing import Any

import pytest

from jobs.contract.goodput import PARTS, AttemptMarks, AttemptRecord, Ledger, job_ledger
from service.records.goodput import LedgerJob, attempt_records

T0 = 1_750_000_000.0


def event(seq: int, ts: float, attempt: int, state: str | None = None, **data: Any) -> Any:
    """A job_event row as `read_ledgers` reads it."""
    kind = "state" if state is not None else "environment"
    body = {"state": state, **data} if state is not None else data
    return SimpleNamespace(seq=seq, kind=kind, attempt=attempt, ts=ts, data=body)


def job(state: str = "succeeded", attempt: int = 1, devices: int = 2, reason: Any = None) -> Any:
    return LedgerJob("j1", "alice", "default", "n", state, attempt, devices, reason, None)


def ledger_of(
    events: list[Any], marks: dict[int, AttemptMarks], now: float = T0 + 10_000, **kw: Any
) -> Ledger:
    facts = job(**kw)
    return job_ledger(attempt_records(facts, events, marks), facts.devices, now)


def seconds(ledger: Ledger) -> dict[str, float]:
    return {p.name: p.seconds for p in ledger.parts}


def near(value: float, expected: float) -> bool:
    """Within ±5 % or ±0.5 s of what the scenario injected."""
    return abs(value - expected) <= max(0.5, 0.05 * abs(expected))


def assert_sound(ledger: Ledger) -> None:
    assert [p.name for p in ledger.parts] == list(PARTS)
    assert all(p.seconds >= 0 and p.device_seconds >= 0 for p in ledger.parts)
    assert sum(p.seconds for p in ledger.parts) == ledger.wall_s
    assert sum(reversed([p.seconds for p in ledger.parts])) == ledger.wall_s
    assert sum(p.device_seconds for p in ledger.parts) == ledger.device_s
    for attempt in ledger.attempts:
        assert_sound(attempt.ledger)
    if ledger.attempts:
        assert sum(a.ledger.wall_s for a in ledger.attempts) == ledger.wall_s


def test_a_wait_behind_a_running_job_is_queued_with_the_scheduler_s_reason() -> None:
    reason = "behind 1 job(s) of higher priority; waiting for 1 node(s) with 2 free device(s)"
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0 + 42.0, 1, "starting", worker="w1", pending_reason=reason),
        event(3, T0 + 46.0, 1, "running"),
        event(9, T0 + 60.0, 1, "succeeded", exit_reason="completed"),
    ]
    marks = {1: AttemptMarks(first_step_at=T0 + 47, last_progress_at=T0 + 59, ended_at=T0 + 59.5)}
    ledger = ledger_of(events, marks)
    assert_sound(ledger)
    parts = seconds(ledger)
    assert near(parts["queued"], 42.0) and ledger.part("queued").detail == reason
    assert ledger.part("queued").device_seconds == 0.0
    assert near(parts["launch"], 4.0) and near(parts["first_step"], 1.0)
    assert near(parts["training"], 12.0) and near(parts["teardown"], 1.0)
    assert ledger.wall_s == 60.0
    assert ledger.device_s == 2 * 18.0
    assert ledger.goodput == round(2 * 12.0 / (2 * 18.0), 6)


def test_an_environment_build_is_its_own_part_within_the_start() -> None:
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0 + 1.0, 1, "starting"),
        event(3, T0 + 31.0, 1, seconds=29.5, cached=False, key="k"),
        event(4, T0 + 34.0, 1, "running"),
        event(5, T0 + 50.0, 1, "succeeded"),
    ]
    marks = {1: AttemptMarks(first_step_at=T0 + 35, last_progress_at=T0 + 49, ended_at=T0 + 49)}
    parts = seconds(ledger_of(events, marks))
    assert near(parts["environment"], 29.5)
    assert near(parts["launch"], 3.5)
    assert "0 of them cached" in (ledger_of(events, marks).part("environment").detail or "")


def killed_and_resumed() -> tuple[list[Any], dict[int, AttemptMarks], dict[str, float]]:
    """A rank killed after 9 steps of 0.5 s with a checkpoint every 4 steps (each save 1.5 s),
    retried, resumed from step 8 and finished at step 12: the script's own clock."""
    step_s, save_s = 0.5, 1.5
    clock = T0 + 5.0  # the first attempt's ranks are up
    first_step_at = clock + step_s
    saves: list[tuple[float, float]] = []
    for step in range(1, 10):
        clock += step_s
        if step % 4 == 0:
            saves.append((clock, clock + save_s))
            clock += save_s
    killed = clock
    attempt_1 = AttemptMarks(
        first_step_at=first_step_at,
        last_progress_at=killed,
        checkpoint_stall_s=sum(e - s for s, e in saves),
        checkpoint_saves=len(saves),
        last_checkpoint_at=saves[-1][1],
        ended_at=killed + 0.3,
    )
    requeued = killed + 1.0
    up = requeued + 5.0
    clock, saves_2 = up, []
    for step in range(9, 13):
        clock += step_s
        if step % 4 == 0:
            saves_2.append((clock, clock + save_s))
            clock += save_s
    attempt_2 = AttemptMarks(
        first_step_at=up + step_s,
        last_progress_at=clock,
        checkpoint_stall_s=save_s,
        checkpoint_saves=1,
        last_checkpoint_at=clock,
        ended_at=clock + 0.2,
    )
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0 + 1.0, 1, "starting"),
        event(3, T0 + 5.0, 1, "running"),
        event(9, requeued, 2, "queued", retry_of=1, exit_reason="user_error"),
        event(10, requeued + 2.0, 2, "starting"),
        event(11, up, 2, "running"),
        event(20, clock + 0.5, 2, "succeeded", exit_reason="completed"),
    ]
    expected = {
        "lost_work": killed - saves[-1][1],  # step 9, redone by the retry
        "checkpoint_stall": save_s * 3,
        "retry_gap": 2.0,
        "training": step_s * 8 + step_s * 4 - step_s * 2,  # less the two first steps
    }
    return events, {1: attempt_1, 2: attempt_2}, expected


def test_a_rank_killed_after_n_steps_loses_the_training_since_its_last_checkpoint() -> None:
    events, marks, expected = killed_and_resumed()
    ledger = ledger_of(events, marks)
    assert_sound(ledger)
    parts = seconds(ledger)
    for name, value in expected.items():
        assert near(parts[name], value), (name, parts[name], value)
    first, second = (a.ledger for a in ledger.attempts)
    assert first.part("lost_work").seconds == pytest.approx(expected["lost_work"], abs=0.01)
    assert "1 (user_error)" in (first.part("lost_work").detail or "")
    assert second.part("lost_work").seconds == 0.0
    assert second.part("retry_gap").seconds == 2.0 and first.part("retry_gap").seconds == 0


def test_a_failed_attempt_without_a_checkpoint_loses_all_it_trained() -> None:
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0 + 1, 1, "starting"),
        event(3, T0 + 3, 1, "running"),
        event(4, T0 + 20, 2, "queued", exit_reason="oom"),
        event(5, T0 + 30, 2, "failed", exit_reason="launch_error"),
    ]
    marks = {1: AttemptMarks(first_step_at=T0 + 4, last_progress_at=T0 + 19, ended_at=T0 + 19)}
    parts = seconds(ledger_of(events, marks, state="failed", attempt=2))
    assert (parts["training"], parts["lost_work"]) == (0.0, 15.0)
    assert parts["retry_gap"] == 10.0


def test_a_checkpoint_that_sleeps_inside_its_save_is_a_stall() -> None:
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0, 1, "starting"),
        event(3, T0 + 2, 1, "running"),
        event(4, T0 + 40, 1, "succeeded"),
    ]
    stall = AttemptMarks(
        first_step_at=T0 + 3,
        last_progress_at=T0 + 39,
        checkpoint_stall_s=3 * 2.25,
        checkpoint_saves=3,
        eval_s=4.0,
        evals=2,
        ended_at=T0 + 39.5,
    )
    ledger = ledger_of(events, {1: stall})
    parts = seconds(ledger)
    assert parts["checkpoint_stall"] == 6.75 and parts["eval"] == 4.0
    assert parts["training"] == 36.0 - 6.75 - 4.0
    assert ledger.part("checkpoint_stall").detail == "3 checkpoint save(s) marked"


def test_a_hang_is_from_the_last_progress_to_the_watchdog_s_stop() -> None:
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0, 1, "starting"),
        event(3, T0 + 4, 1, "running"),
        event(4, T0 + 31, 1, "failed", exit_reason="hang"),
    ]
    marks = AttemptMarks(
        first_step_at=T0 + 5, last_progress_at=T0 + 10, hang_since=T0 + 10.1, ended_at=T0 + 30.1
    )
    parts = seconds(ledger_of(events, {1: marks}, state="failed"))
    assert near(parts["hang"], 20.0) and near(parts["training"], 5.0)
    assert near(parts["teardown"], 0.9)


def test_a_hang_before_the_worker_saw_the_ranks_up_is_a_hang_not_a_launch() -> None:
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0, 1, "starting"),
        event(3, T0 + 5.1, 1, "running"),  # noted as the stop came
        event(4, T0 + 6, 1, "failed", exit_reason="hang"),
    ]
    marks = AttemptMarks(hang_since=T0 + 2, ended_at=T0 + 5)
    parts = seconds(ledger_of(events, {1: marks}, state="failed"))
    assert (parts["launch"], parts["hang"], parts["teardown"]) == (2.0, 3.0, 1.0)


def test_a_program_that_never_reports_trains_from_its_start_to_its_end() -> None:
    events = [
        event(1, T0, 1, "queued"),
        event(2, T0 + 1, 1, "starting"),
        event(3, T0 + 2, 1, "running"),
        event(4, T0 + 12, 1, "succeeded"),
    ]
    parts = seconds(ledger_of(events, {1: AttemptMarks(ended_at=T0 + 11)}))
    assert (parts["first_step"], parts["training"], parts["teardown"]) == (0.0, 9.0, 1.0)


def test_a_running_job_trains_up_to_now_and_a_queued_one_waits_up_to_now() -> None:
    events = [event(1, T0, 1, "queued"), event(2, T0 + 1, 1, "starting")]
    events.append(event(3, T0 + 3, 1, "running"))
    marks = {1: AttemptMarks(first_step_at=T0 + 4, last_progress_at=T0 + 5)}
    running = ledger_of(events, marks, now=T0 + 20, state="running")
    assert seconds(running)["training"] == 16.0 and running.wall_s == 20.0
    waiting = ledger_of(events[:1], {}, now=T0 + 7, state="queued", reason="over quota")
    assert seconds(waiting)["queued"] == 7.0 and waiting.part("queued").detail == "over quota"
    assert waiting.device_s == 0.0 and waiting.goodput == 0.0


NONSENSE = [None, -1e30, -5.0, 0.0, math.nan, math.inf, -math.inf, 1e300, 3.0, T0 - 1e6]


def nonsense(rng: random.Random) -> float | None:
    return T0 + rng.uniform(-100, 200) if rng.random() < 0.5 else rng.choice(NONSENSE)


@pytest.mark.parametrize("seed", range(200))
def test_records_that_make_no_sense_still_give_sound_parts(seed: int) -> None:
    rng = random.Random(seed)
    records = []
    previous_end = T0
    for number in range(1, rng.randint(1, 4) + 1):
        end = previous_end + rng.uniform(-10, 100)
        marks = AttemptMarks(
            first_step_at=nonsense(rng),
            last_progress_at=nonsense(rng),
            checkpoint_stall_s=rng.choice([-1e9, 0.0, 5.0, 1e18, math.nan]),
            eval_s=rng.choice([-3.0, 0.0, 2.5, math.inf]),
            last_checkpoint_at=nonsense(rng),
            ended_at=nonsense(rng),
            hang_since=nonsense(rng) if rng.random() < 0.3 else None,
        )
        records.append(
            AttemptRecord(
                attempt=number,
                queued_at=previous_end,
                started_at=nonsense(rng),
                running_at=nonsense(rng),
                end_at=end if rng.random() < 0.8 else None,
                retried=rng.random() < 0.5,
                environment_s=rng.choice([-1.0, 0.0, 7.0, 1e12]),
                environment_end_at=nonsense(rng),
                marks=marks,
            )
        )
        previous_end = end
    ledger = job_ledger(records, rng.randint(0, 16), now=T0 + rng.uniform(-50, 500))
    assert_sound(ledger)
    assert 0.0 <= ledger.goodput <= 1.0
