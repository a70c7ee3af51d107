"""The ETA from the recent step rate (`progress.eta_s`)."""

import math

import pytest

from worker.step_rate import TRUST_S, WINDOW_S, StepRate

NOW = 1_700_000_000.0


def feed(rate: StepRate, marks: list[tuple[int, float]]) -> None:
    for step, ts in marks:
        rate.observe(step, ts, now=ts)


def test_a_steady_rate() -> None:
    rate = StepRate()
    feed(rate, [(step, NOW + step * 0.5) for step in range(0, 41)])  # 2 steps/s
    estimate = rate.estimate(total_steps=100)
    assert estimate is not None
    assert estimate.eta_s == pytest.approx(30.0)  # 60 steps left at 2 steps/s
    assert estimate.at == NOW + 20.0
    assert rate.estimate(total_steps=40).eta_s == 0.0  # type: ignore[union-attr]
    assert rate.estimate(total_steps=10).eta_s == 0.0  # type: ignore[union-attr]


def test_the_recent_rate_not_the_run_s_average() -> None:
    rate = StepRate()
    feed(rate, [(step, NOW + step * 0.1) for step in range(0, 1001)])  # 10 steps/s, 100 s
    slow_from = NOW + 100.0
    feed(rate, [(1000 + i, slow_from + i * 2.0) for i in range(1, 31)])  # then 0.5 steps/s
    estimate = rate.estimate(total_steps=1130)
    assert estimate is not None
    assert estimate.eta_s == pytest.approx(200.0)  # 100 steps at 0.5/s; the average says ~20


def test_the_window_keeps_recent_time_only() -> None:
    rate = StepRate(window_marks=1000)
    feed(rate, [(0, NOW), (1, NOW + 1), (2, NOW + 1000), (3, NOW + 1001)])
    # The first two are older than the window before the newest: 1 step/s, not 3 in 1001 s.
    assert rate.steps_per_s() == pytest.approx(1.0)
    assert all(m.ts >= NOW + 1001 - WINDOW_S for m in rate.marks)


def test_no_total_no_estimate() -> None:
    rate = StepRate()
    feed(rate, [(1, NOW), (2, NOW + 1)])
    assert rate.estimate(total_steps=None) is None
    assert StepRate().estimate(total_steps=10) is None
    one = StepRate()
    feed(one, [(5, NOW)])
    assert one.estimate(total_steps=10) is None


def test_a_step_going_back_after_a_resume_starts_again() -> None:
    rate = StepRate()
    feed(rate, [(step, NOW + step) for step in range(100, 120)])  # 1 step/s
    assert rate.observe(40, NOW + 200, now=NOW + 200)  # resumed from a checkpoint at step 40
    assert rate.estimate(total_steps=200) is None  # one step since: no rate yet
    feed(rate, [(41, NOW + 204), (42, NOW + 208)])  # 0.25 steps/s now
    estimate = rate.estimate(total_steps=50)
    assert estimate is not None and estimate.eta_s == pytest.approx(32.0)


def test_repeated_points_of_a_step_count_once() -> None:
    rate = StepRate()
    assert rate.observe(10, NOW, now=NOW)
    assert not rate.observe(10, NOW + 30, now=NOW + 30)  # the step's evaluation, later
    assert rate.observe(11, NOW + 31, now=NOW + 31)
    assert rate.steps_per_s() == pytest.approx(1 / 31)
    assert not rate.observe(None, NOW + 40, now=NOW + 40)  # no step: nothing to time


@pytest.mark.parametrize(
    "ts", [math.nan, math.inf, -math.inf, 0.0, -5.0, 1e300, NOW + TRUST_S + 1, NOW - 3600]
)
def test_nonsense_timestamps_give_way_to_the_worker_clock(ts: float) -> None:
    rate = StepRate()
    rate.observe(0, NOW - 10, now=NOW - 10)
    rate.observe(10, ts, now=NOW)  # read at NOW: the point's own time is not believed
    assert rate.marks[-1].ts == NOW
    estimate = rate.estimate(total_steps=20)
    assert estimate is not None and estimate.eta_s == pytest.approx(10.0)


def test_a_clock_going_back_starts_again() -> None:
    rate = StepRate()
    feed(rate, [(1, NOW), (2, NOW + 1), (3, NOW + 2)])
    rate.observe(4, NOW - 50, now=NOW - 50)  # the worker's clock stepped back
    assert len(rate.marks) == 1 and rate.estimate(total_steps=10) is None
    assert rate.observe(5, NOW - 50, now=NOW - 50)  # no time between them: no rate
    assert rate.estimate(total_steps=10) is None
