"""How the benchmarks turn their raw timings into table rows: P4's flanked phases, P7's
checkpoint stalls and nvidia-smi's utilisation lines, P9c's windows, P1I's slices."""

import json
from pathlib import Path

import pytest

from bench.p1_interleaved import Way
from bench.p4_metrics import Phase, TrainingRun, reporting_cost
from bench.p7_gpu import checkpoint_stalls, find_target, parse_utilisation
from bench.p9_store_stall import stall_ratios


def training_run(phases: list[Phase]) -> TrainingRun:
    return TrainingRun(phases, 0, 0, 0.0, 0.0, 0.0, 0.0)


def test_each_on_phase_is_compared_with_the_mean_of_the_off_phases_either_side() -> None:
    # Off phases slow down steadily (drift): 100, 90, 80 steps/s; each on phase runs at 95 %
    # of the mean of its neighbours, which the one before alone would misjudge.
    phases = [
        Phase("off", 100, 1.0, 0.0),
        Phase("written", 95 * 95, 100.0, 2.0),  # 0.95 × mean(100, 90)
        Phase("off", 90, 1.0, 0.0),
        Phase("queued", 85 * 99, 100.0, 1.0),  # 0.99 × mean(90, 80)
        Phase("off", 80, 1.0, 0.0),
        Phase("plain", 80, 1.0, 0.0),  # no off phase after it: left out
    ]
    written = reporting_cost(training_run(phases), "written", 100)
    queued = reporting_cost(training_run(phases), "queued", 100)
    assert written.measured.startswith("0.950 (median of 1 phases")
    assert "reporting itself 2.00 %" in written.measured
    assert written.met is False
    assert queued.measured.startswith("0.990 (median of 1 phases")
    with pytest.raises(ValueError):
        reporting_cost(training_run(phases), "plain", 100)  # nothing to compare


def metric(step: int, ts: float, **extra: float) -> dict[str, object]:
    return {"type": "metric", "step": step, "ts": ts, "metrics": {"loss": 1.0, "lr": 0.1, **extra}}


def test_a_checkpoint_stall_is_the_saving_steps_gap_minus_the_usual_one() -> None:
    events = [
        metric(1, 0.00),
        metric(2, 0.01),
        {"type": "checkpoint", "step": 2, "path": "a.pt"},
        metric(3, 0.05),  # 40 ms after step 2's line: the save took 30 ms more than a step
        metric(4, 0.06),
        metric(5, 0.20, accuracy=0.9),  # an evaluation: neither gap around it counts
        metric(6, 0.21),
        {"type": "checkpoint", "step": 6, "path": "b.pt"},
        metric(7, 0.23),
        metric(8, 0.24),
    ]
    stalls, usual = checkpoint_stalls(events)
    assert usual == pytest.approx(0.01)
    assert stalls == pytest.approx([0.03, 0.01])


def test_checkpoint_stalls_need_a_save_and_a_plain_step() -> None:
    with pytest.raises(ValueError):
        checkpoint_stalls([metric(1, 0.0), metric(2, 0.01)])


def test_utilisation_is_the_mean_over_the_gpus() -> None:
    assert parse_utilisation("87\n93\n") == 90.0
    with pytest.raises(ValueError):
        parse_utilisation("")


def test_p7_runs_on_cpu_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setenv("LAUNCHBAY_BENCH_P7_DEVICE", "cpu")
    target = find_target()
    assert target is not None and (target.device, target.backend) == ("cpu", "gloo")
    monkeypatch.delenv("LAUNCHBAY_BENCH_P7_DEVICE")
    if torch.cuda.is_available():
        target = find_target()
        assert target is not None and target.backend == "nccl"
    else:
        assert find_target() is None


def test_a_busy_window_is_compared_with_the_idle_windows_either_side() -> None:
    windows = [("idle", 0, 1), ("P9c", 1, 2), ("idle", 2, 3), ("P9c-none", 3, 4), ("idle", 4, 5)]
    # Idle steps of 1.0, then 3.0 (a drift); the P9c window's steps 2.2: ÷ 2.0, not ÷ 1.0.
    steps = [(0.1, 1.0), (0.5, 1.0), (1.2, 2.2), (2.5, 3.0), (3.5, 3.0), (4.5, 3.0)]
    ratios = stall_ratios(windows, steps)
    assert ratios == {"P9c": [pytest.approx(1.1)], "P9c-none": [pytest.approx(1.0)]}


def test_a_slice_rate_counts_only_the_lines_written_inside_the_slice(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    lines = [(0.0, 0), (1.0, 10), (2.0, 20), (10.0, 20), (10.5, 40), (11.0, 60), (12.0, 70)]
    events.write_text(
        "".join(json.dumps({"type": "metric", "step": s, "ts": t}) + "\n" for t, s in lines)
        + json.dumps({"type": "checkpoint", "path": "x.pt", "ts": 10.7})
        + "\n"
    )
    way = Way("bare", events, stop=lambda: None, slices=[(0.5, 2.5), (10.2, 11.5)])
    # 10 steps in 1 s (the paused gap from 2 to 10 s left out), then 20 steps in 0.5 s.
    assert way.rates() == [pytest.approx(10.0), pytest.approx(40.0)]
