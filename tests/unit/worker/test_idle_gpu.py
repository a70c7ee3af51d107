"""The idle-GPU verdicts, fed samples as the GPU watch takes them."""

import pytest
from pydantic import ValidationError

from service.scheduling.idle_gpu import IdleGpuPolicy
from worker.gpu_sampler import GpuSample
from worker.idle_gpu import IdleGpuJudge


def gpus(*utilization: float | None) -> list[GpuSample]:
    return [GpuSample(i, u, 1e9, 100.0) for i, u in enumerate(utilization)]


def policy(action: str = "warn", below: float = 5, for_s: float = 60) -> IdleGpuPolicy:
    return IdleGpuPolicy.model_validate({"below_percent": below, "for_s": for_s, "action": action})


def test_warns_once_when_every_gpu_stays_below_for_long_enough() -> None:
    judge = IdleGpuJudge(policy("warn"))
    assert judge.observe(0, gpus(1, 4.9)) is None
    assert judge.observe(59, gpus(0, 0)) is None
    verdict = judge.observe(60, gpus(0, 2))
    assert verdict is not None and verdict.action == "warn" and verdict.idle_s == 60
    assert "2 GPU(s) stayed below 5% utilisation for 60 s" in verdict.message
    assert judge.observe(70, gpus(0, 0)) is None  # once
    assert judge.observe(80, gpus(90, 0)) is None
    assert judge.observe(200, gpus(0, 0)) is None  # and once only, also after a busy spell


def test_one_busy_gpu_starts_the_count_again() -> None:
    judge = IdleGpuJudge(policy("stop"))
    assert judge.observe(0, gpus(0, 0)) is None
    assert judge.observe(50, gpus(0, 5)) is None  # at the threshold is not below it
    assert judge.observe(100, gpus(0, 0)) is None
    assert judge.observe(159, gpus(0, 0)) is None
    verdict = judge.observe(160, gpus(0, 0))
    assert verdict is not None and verdict.action == "stop" and verdict.idle_s == 60
    assert verdict.message.startswith("stopped by the idle-GPU policy")
    assert judge.observe(170, gpus(0, 0)) is not None  # a stop is said until it happens


def test_no_gpu_or_an_unknown_reading_is_never_idle() -> None:
    judge = IdleGpuJudge(policy("stop", for_s=1))
    for now in range(0, 100, 10):
        assert judge.observe(now, []) is None  # a job holding no GPU
        assert judge.observe(now, gpus(0, None)) is None  # a MIG instance: no utilisation
    assert judge.observe(100, gpus(0, 0)) is None
    assert judge.observe(101, gpus(0, 0)) is not None


def test_a_clock_that_goes_back_starts_the_count_again() -> None:
    judge = IdleGpuJudge(policy("stop"))
    assert judge.observe(1000, gpus(0)) is None
    assert judge.observe(10, gpus(0)) is None
    assert judge.observe(69, gpus(0)) is None
    assert judge.observe(70, gpus(0)) is not None


@pytest.mark.parametrize(
    "body",
    [
        {"below_percent": 0, "for_s": 60},
        {"below_percent": -5, "for_s": 60},
        {"below_percent": 101, "for_s": 60},
        {"below_percent": float("nan"), "for_s": 60},
        {"below_percent": 5, "for_s": float("inf")},
        {"below_percent": 5, "for_s": 0},
        {"below_percent": 5, "for_s": 10**9},
        {"below_percent": "5%", "for_s": 60},
        {"below_percent": 5, "for_s": 60, "action": "kill"},
        {"below_percent": 5, "for_s": 60, "then": "stop"},
        {"for_s": 60},
    ],
)
def test_nonsense_policies_are_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        IdleGpuPolicy.model_validate(body)
