"""`log_metrics`: the spec's patterns over rank 0's log lines, as the worker reads them."""

import pytest

from jobs.spec import JobSpec
from worker.log_metrics import MAX_MATCHES_PER_LINE, LogMetrics

TRAINER = r"'eval_loss': (?P<eval_loss>[0-9.e-]+).*'epoch': (?P<epoch>[0-9.]+)"


def test_named_groups_are_metrics_step_and_epoch_place_them() -> None:
    patterns = LogMetrics([r"step (?P<step>\d+) loss=(?P<loss>\S+) acc=(?P<acc>\S+)", TRAINER])
    lines = [
        "step 12 loss=0.25 acc=0.5",
        "{'eval_loss': 0.3370, 'eval_accuracy': 1.0, 'epoch': 2.0}",
        "nothing here",
    ]
    found = [(p.name, p.value, p.step, p.epoch, p.ts) for p in patterns.points(lines, 7.0)]
    assert sorted(found) == [
        ("acc", 0.5, 12, None, 7.0),
        ("eval_loss", 0.337, None, 2, 7.0),
        ("loss", 0.25, 12, None, 7.0),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "step 3 loss=nan",  # not finite
        "step 3 loss=inf",
        "step 3 loss=x" + "9" * 100,  # not a number
        "step 3 loss=" + "1" * 65,  # a number too long to be one
    ],
)
def test_what_is_not_a_finite_number_gives_no_point(line: str) -> None:
    assert LogMetrics([r"step (?P<step>\d+) loss=(?P<loss>\S+)"]).points([line], 1.0) == []


def test_a_step_the_database_cannot_hold_is_left_out_not_the_point() -> None:
    pattern = LogMetrics([r"step (?P<step>-?\d+) loss=(?P<loss>\S+)"])
    for line in ("step -1 loss=0.5", "step 99999999999 loss=0.5"):
        (point,) = pattern.points([line], 1.0)
        assert (point.step, point.value) == (None, 0.5)


def test_a_pattern_matching_everywhere_gives_a_bounded_number_of_points() -> None:
    hostile = "a" * 16 * 1024  # a 16 KiB log line, the longest the worker keeps
    found = LogMetrics([r"(?P<a>a)", r"(?P<x>(a+)+)$"]).points([hostile], 1.0)
    assert found == []  # 'a' is not a number: nothing, and in linear time
    numbers = "1 " * 8 * 1024
    assert len(LogMetrics([r"(?P<n>\d)"]).points([numbers], 1.0)) == MAX_MATCHES_PER_LINE


def test_the_spec_refuses_what_cannot_be_matched_safely() -> None:
    base = {"name": "x", "recipe": "synthetic"}
    assert JobSpec.model_validate(base).capture == "auto"
    assert JobSpec.model_validate(base).log_metrics == []
    ok = JobSpec.model_validate({**base, "log_metrics": [r"loss=(?P<loss>\S+)"]})
    assert ok.log_metrics == [r"loss=(?P<loss>\S+)"]
    for bad in (
        [r"(?P<x>a)\1"],  # a backreference needs backtracking
        [r"(?P<x>a)(?=b)"],
        [r"(?P<x>a{1,100}){1,100}"],
        [r"(?P<step>\d+)"],  # no metric
        ["(?P<x>"],
        ["x"] * 17,
        ["(?P<x>a)" + "b" * 300],
    ):
        with pytest.raises(ValueError):
            JobSpec.model_validate({**base, "log_metrics": bad})
    with pytest.raises(ValueError, match="needs capture 'auto'"):
        JobSpec.model_validate({**base, "capture": "off", "log_metrics": [r"(?P<x>\d)"]})
    with pytest.raises(ValueError):
        JobSpec.model_validate({**base, "capture": "on"})
