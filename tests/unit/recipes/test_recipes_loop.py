"""The shared training loop, driven in-process through the synthetic recipe (one rank)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from jobs.recipes import synthetic
from jobs.recipes.configs import SyntheticConfig
from jobs.recipes.loop import TrainState, plan_total_steps
from jobs.runtime import distributed, env


def run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    resume_from: Path | None = None,
    checkpoint: str = '{"every_steps": 10, "every_epochs": 1}',
    **config: Any,
) -> tuple[int, list[dict[str, Any]], Path]:
    run_dir = tmp_path / name
    monkeypatch.setenv(env.EVENTS_FILE, str(run_dir / "events.jsonl"))
    monkeypatch.setenv(env.CHECKPOINT_DIR, str(run_dir / "ckpt"))
    monkeypatch.setenv(env.CHECKPOINT, checkpoint)
    monkeypatch.setenv(env.RESUME_FROM, str(resume_from or ""))
    with distributed() as ctx:
        final = synthetic.train(SyntheticConfig(**config), ctx)
    events_file = run_dir / "events.jsonl"
    raw_lines = events_file.read_text().splitlines() if events_file.exists() else []
    lines = [json.loads(raw) for raw in raw_lines]
    return final, lines, run_dir / "ckpt"


def test_plan_total_steps() -> None:
    assert plan_total_steps(18, 3, None) == 54
    assert plan_total_steps(18, 3, 25) == 25
    with pytest.raises(ValueError):
        plan_total_steps(0, 3, None)


def test_a_run_reports_learns_and_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final, lines, ckpt_dir = run(tmp_path, monkeypatch, "full")
    assert final == 54  # 576 training samples / 32 per step = 18 steps, 3 epochs
    metrics = [e for e in lines if e["type"] == "metric"]
    steps = [e["step"] for e in metrics]
    assert steps == sorted(set(steps)) and steps[-1] == 54
    assert {5, 10, 18, 36, 54} <= set(steps)
    assert all(e["total_steps"] == 54 for e in metrics)
    epoch_ends = [e for e in metrics if "val_loss" in e["metrics"]]
    assert [(e["step"], e["epoch"]) for e in epoch_ends] == [(18, 1), (36, 2), (54, 3)]
    assert epoch_ends[-1]["metrics"]["val_loss"] < 0.01 < epoch_ends[0]["metrics"]["loss"]
    saved = [e["step"] for e in lines if e["type"] == "checkpoint"]
    assert saved == [10, 18, 20, 30, 36, 40, 50, 54]
    assert sorted(p.name for p in ckpt_dir.iterdir()) == [f"step-{s:09d}.pt" for s in saved]


def test_resuming_mid_epoch_ends_where_an_unbroken_run_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, full_dir = run(tmp_path, monkeypatch, "full")
    final, lines, resumed_dir = run(
        tmp_path, monkeypatch, "resumed", resume_from=full_dir / "step-000000030.pt"
    )
    assert final == 54
    assert min(e["step"] for e in lines) > 30, "no step is repeated"
    unbroken = torch.load(full_dir / "step-000000054.pt", weights_only=True)
    resumed = torch.load(resumed_dir / "step-000000054.pt", weights_only=True)
    for name, value in unbroken["model"].items():
        torch.testing.assert_close(resumed["model"][name], value, rtol=0, atol=1e-6)


def test_steps_override_epochs_and_a_finished_run_resumes_to_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    final, lines, ckpt_dir = run(tmp_path, monkeypatch, "short", steps=25, checkpoint="{}")
    assert final == 25
    assert [e["step"] for e in lines if e["type"] == "checkpoint"] == [18, 25]
    last = torch.load(ckpt_dir / "step-000000025.pt", weights_only=True)
    assert (last["epoch"], last["sampler_position"]) == (2, 7)
    again, more, _ = run(
        tmp_path, monkeypatch, "again", resume_from=ckpt_dir / "step-000000025.pt", steps=25
    )
    assert again == 25 and more == []


def test_fail_on_rank_raises_after_the_first_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(RuntimeError, match="synthetic failure on rank 0"):
        run(tmp_path, monkeypatch, "failing", fail_on_rank=0)


def test_the_train_state_is_what_a_checkpoint_holds_and_restores() -> None:
    state = TrainState(step=30, epoch=2, position=10)
    saved = state.state_dict()
    assert saved == {"step": 30, "epoch": 2, "sampler_position": 10}
    mid_epoch = TrainState()
    mid_epoch.load_state_dict(saved, batches_per_epoch=20)
    assert mid_epoch == state
    at_epoch_end = TrainState()
    at_epoch_end.load_state_dict({**saved, "sampler_position": 20}, batches_per_epoch=20)
    assert at_epoch_end == TrainState(step=30, epoch=3, position=0)
