"""Each built-in recipe under the real launcher: torchrun --nproc_per_node 2, gloo on CPU.

The LAUNCHBAY_* environment is set here as the worker would set it, and what rank 0
wrote to the events file is checked against what it printed, so a metric line written by
rank 1 too would show up as a duplicate. Measured on 2 CPU cores: synthetic reaches a
held-out MSE of about 0.0027 (the label noise alone is 0.0025), digits about 0.98
held-out accuracy, text about 0.93 on the shipped VADER data.
"""

from __future__ import annotations

import json
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from jobs.recipes.digits import DigitsNet
from jobs.recipes.textdata import DEFAULT_CSV
from tests.support.ranks import run_torchrun

TIMEOUT_S = 240


@dataclass
class Run:
    returncode: int
    output: str
    events: list[dict[str, Any]]
    ckpt_dir: Path
    seconds: float

    @property
    def metrics(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "metric"]

    @property
    def checkpoints(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "checkpoint"]

    def last(self, name: str) -> float:
        value: float = [e["metrics"][name] for e in self.metrics if name in e["metrics"]][-1]
        return value

    def model(self, step: int) -> dict[str, torch.Tensor]:
        state = torch.load(self.ckpt_dir / f"step-{step:09d}.pt", weights_only=True)
        model_state: dict[str, torch.Tensor] = state["model"]
        return model_state


def launch(
    run_dir: Path,
    recipe: str,
    config: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
    resume_from: Path | None = None,
) -> Run:
    """One attempt of a recipe job, with the environment the worker gives the ranks."""
    run_dir.mkdir(parents=True, exist_ok=True)
    events_file, ckpt_dir = run_dir / "events.jsonl", run_dir / "checkpoints"
    env = {
        "LAUNCHBAY_JOB_ID": uuid.uuid4().hex,
        "LAUNCHBAY_ATTEMPT": "2" if resume_from else "1",
        "LAUNCHBAY_EVENTS_FILE": str(events_file),
        "LAUNCHBAY_CHECKPOINT_DIR": str(ckpt_dir),
        "LAUNCHBAY_RESUME_FROM": str(resume_from or ""),
        "LAUNCHBAY_CONFIG": json.dumps(config or {}),
        "LAUNCHBAY_CHECKPOINT": json.dumps(checkpoint or {"every_epochs": 1}),
        "LAUNCHBAY_AMP": "none",
        "LAUNCHBAY_DEVICE": "auto",
        "LAUNCHBAY_BACKEND": "auto",
        "LAUNCHBAY_COLLECTIVE_TIMEOUT_S": "60",
    }
    started = time.monotonic()
    done = run_torchrun(["-m", f"jobs.recipes.{recipe}"], env=env, cwd=run_dir, timeout_s=TIMEOUT_S)
    seconds = time.monotonic() - started
    lines = events_file.read_text().splitlines() if events_file.exists() else []
    return Run(done.returncode, done.stdout, [json.loads(x) for x in lines], ckpt_dir, seconds)


def assert_reported_once_by_rank_zero(run: Run) -> None:
    """Rank 0 prints one log line per metric line; steps never repeat."""
    assert run.returncode == 0, run.output[-3000:]
    printed = re.findall(r"^epoch (\d+) step (\d+)/\d+ ", run.output, flags=re.MULTILINE)
    assert [(e["epoch"], e["step"]) for e in run.metrics] == [
        (int(epoch), int(step)) for epoch, step in printed
    ]
    steps = [e["step"] for e in run.metrics]
    assert steps == sorted(set(steps)), "one metric line per step, in order"
    for line in run.checkpoints:
        assert (run.ckpt_dir / line["path"]).is_file()


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    # 576 training samples, 288 per rank, 32 per step: 9 steps an epoch, 27 in 3 epochs.
    return launch(
        tmp_path_factory.mktemp("synthetic") / "run",
        "synthetic",
        checkpoint={"every_steps": 4, "every_epochs": None},
    )


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    # 1,437 training images, 719 per rank, 32 per step: 23 steps an epoch, 230 in 10.
    return launch(
        tmp_path_factory.mktemp("digits") / "run",
        "digits",
        checkpoint={"every_steps": 50, "every_epochs": 1},
    )


def test_synthetic_learns_reports_once_and_checkpoints(synthetic_run: Run) -> None:
    assert_reported_once_by_rank_zero(synthetic_run)
    assert [e["step"] for e in synthetic_run.metrics] == [5, 9, 10, 15, 18, 20, 25, 27]
    assert [e["step"] for e in synthetic_run.checkpoints] == [4, 8, 12, 16, 20, 24, 27]
    assert all(e["total_steps"] == 27 for e in synthetic_run.metrics)
    assert synthetic_run.last("val_loss") < 0.01
    print(f"synthetic: val_loss {synthetic_run.last('val_loss'):.4f}, "
          f"{synthetic_run.seconds:.1f}s")  # fmt: skip


def test_synthetic_resumed_mid_epoch_ends_like_an_unbroken_run(
    synthetic_run: Run, tmp_path: Path
) -> None:
    resumed = launch(
        tmp_path / "attempt-2",
        "synthetic",
        checkpoint={"every_steps": 4, "every_epochs": None},
        resume_from=synthetic_run.ckpt_dir / "step-000000012.pt",  # epoch 2, 3 batches in
    )
    assert_reported_once_by_rank_zero(resumed)
    assert "resumed at step 12: epoch 2, skipping 3 batches" in resumed.output
    assert [e["step"] for e in resumed.metrics] == [15, 18, 20, 25, 27]
    assert [e["step"] for e in resumed.checkpoints] == [16, 20, 24, 27]
    # Same samples in the same order: the same weights and held-out scores as unbroken.
    for name, value in synthetic_run.model(27).items():
        torch.testing.assert_close(resumed.model(27)[name], value, rtol=0, atol=1e-6)
    unbroken = {e["step"]: e["metrics"]["val_loss"] for e in synthetic_run.metrics
                if "val_loss" in e["metrics"]}  # fmt: skip
    for line in resumed.metrics:
        if "val_loss" in line["metrics"]:
            assert line["metrics"]["val_loss"] == pytest.approx(unbroken[line["step"]], rel=1e-5)


def test_synthetic_failure_on_one_rank_fails_the_launch(tmp_path: Path) -> None:
    failed = launch(tmp_path / "run", "synthetic", config={"fail_on_rank": 1})
    assert failed.returncode != 0
    assert "RuntimeError: synthetic failure on rank 1" in failed.output
    root_cause = failed.output.split("Root Cause", 1)[-1]
    assert re.search(r"rank\s*:\s*1 \(local_rank: 1\)", root_cause), failed.output[-3000:]
    assert failed.seconds < 60


def test_digits_reaches_its_held_out_accuracy(digits_run: Run) -> None:
    assert_reported_once_by_rank_zero(digits_run)
    accuracy = digits_run.last("accuracy")
    print(f"digits: held-out accuracy {accuracy:.4f}, {digits_run.seconds:.1f}s")
    assert accuracy >= 0.95
    epoch_ends = [e for e in digits_run.metrics if "accuracy" in e["metrics"]]
    assert [e["epoch"] for e in epoch_ends] == list(range(1, 11))
    assert all(0 <= e["metrics"]["accuracy"] <= 1 for e in epoch_ends)
    # The final checkpoint holds the unwrapped model: it loads strictly into a plain one.
    assert digits_run.checkpoints[-1]["step"] == 230
    assert digits_run.checkpoints[-1]["metrics"]["accuracy"] == accuracy
    DigitsNet(16).load_state_dict(digits_run.model(230), strict=True)


def test_digits_resumed_mid_epoch_restores_optimizer_and_schedule(
    digits_run: Run, tmp_path: Path
) -> None:
    resumed = launch(
        tmp_path / "attempt-2",
        "digits",
        checkpoint={"every_steps": 50, "every_epochs": 1},
        # Epoch 9, 16 batches in: late, so the attempt trains 30 steps rather than 130, and
        # the LR schedule has decayed far from its start for the restored one to be told apart.
        resume_from=digits_run.ckpt_dir / "step-000000200.pt",
    )
    assert_reported_once_by_rank_zero(resumed)
    assert "resumed at step 200: epoch 9, skipping 16 batches" in resumed.output
    assert resumed.metrics[0]["step"] > 200 and resumed.metrics[-1]["step"] == 230
    for name, value in digits_run.model(230).items():
        torch.testing.assert_close(resumed.model(230)[name], value, rtol=1e-4, atol=1e-5)
    assert resumed.last("accuracy") == pytest.approx(digits_run.last("accuracy"), abs=0.006)


def test_text_classifier_on_a_csv_relative_to_the_run_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"  # the job's working directory, where its files are unpacked
    (run_dir / "data").mkdir(parents=True)
    shutil.copy(DEFAULT_CSV, run_dir / "data" / "sentiment.csv")
    run = launch(run_dir, "text", config={"csv_path": "data/sentiment.csv"})
    assert_reported_once_by_rank_zero(run)
    accuracy = run.last("accuracy")
    print(f"text: held-out accuracy {accuracy:.4f}, {run.seconds:.1f}s")
    assert accuracy >= 0.90
    assert "4664 train / 1166 held-out texts, 2 labels" in run.output
    final = torch.load(run.ckpt_dir / run.checkpoints[-1]["path"], weights_only=True)
    assert final["extra"]["labels"] == ["negative", "positive"]
    assert len(final["extra"]["vocab"]) == final["model"]["embedding.weight"].shape[0]
