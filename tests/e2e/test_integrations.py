"""Framework integrations (jobs.integrations) in real 2-rank gloo jobs on CPU: metrics through
the framework's own logging call, a checkpoint registered and downloaded, and a retried
attempt resuming from it. accelerate is a development dependency (requirements-dev.lock):
installed once with the test tools, no package index needed while the tests run."""

import importlib.util
import io
import tarfile
from pathlib import Path

import pytest
import torch

from tests.e2e.test_launch_styles import log_text, upload
from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "integrations"


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="no accelerate")
def test_accelerate_tracker_reports_saves_and_resumes(sqlite_stack: Stack) -> None:
    with sqlite_stack.client() as http:
        code_id = upload(http, EXAMPLES / "accelerate_tracker.py")
        spec = {
            "name": "accelerate-tracker",
            "code": {"code_id": code_id, "entrypoint": "accelerate_tracker.py"},
            "launcher": "torchrun",
            "nproc_per_node": 2,
            "device": "cpu",
            "env": {"ACCELERATE_USE_CPU": "1"},
            "args": ["--epochs", "3", "--fail-after-epoch", "2"],
            "max_retries": 1,
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        job = sqlite_stack.wait_for_state(http, job_id, {"succeeded"}, timeout=240)
        assert job["attempt"] == 2, "the first attempt failed on purpose after epoch 2"
        assert "resumed from epoch 2 (step 8)" in log_text(http, job_id, 0)

        points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
        losses = [p for p in points if p["name"] == "loss"]
        # 4 steps per epoch (256 samples, batches of 32, split over 2 ranks): epochs 1-2 by
        # the first attempt, 3 by the second; each step reported once, by the main process.
        assert sorted(p["step"] for p in losses) == list(range(1, 13))
        assert {p["epoch"] for p in losses} == {0, 1, 2}, "the float epoch's whole part"
        assert {p["value"] for p in points if p["name"] == "epoch"} == {0.5, 1.5, 2.5}

        checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        assert [(c["step"], c["attempt"]) for c in checkpoints][-1] == (12, 2)
        download = http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
        assert download.status_code == 200
        state = torch.load(io.BytesIO(download.content), map_location="cpu", weights_only=True)
        assert set(state["model"]) == {"weight", "bias"}
    assert wait_until(lambda: job_processes(job_id) == [], timeout=10)


def test_trainer_callback_reports_registers_and_resumes(sqlite_stack: Stack) -> None:
    """transformers is the job's own requirement (from PyPI, through the worker's uv and its
    cache), so the worker's environment stays without it: Launchbay imports no framework."""
    assert importlib.util.find_spec("transformers") is None, "a job's package, not the worker's"
    with sqlite_stack.client() as http:
        code_id = upload(http, EXAMPLES / "trainer_tiny_bert.py")
        spec = {
            "name": "tiny-bert-trainer",
            "code": {"code_id": code_id, "entrypoint": "trainer_tiny_bert.py"},
            "launcher": "torchrun",
            "nproc_per_node": 2,
            "device": "cpu",
            "env": {"ACCELERATE_USE_CPU": "1"},
            "environment": {"requirements": ["transformers==4.57.1"]},
            "args": ["--max-steps", "8", "--save-steps", "4", "--fail-at-step", "4"],
            "max_retries": 1,
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        job = sqlite_stack.wait_for_state(http, job_id, {"succeeded"}, timeout=300)
        assert job["attempt"] == 2, "the first attempt failed on purpose after step 4"
        assert "resuming from checkpoint-4" in log_text(http, job_id, 0)

        points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
        names = {p["name"] for p in points}
        assert {"loss", "learning_rate", "eval_loss", "eval_accuracy", "epoch"} <= names
        assert {p["step"] for p in points if p["name"] == "loss"} == set(range(1, 9))

        checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        assert [(c["step"], c["attempt"]) for c in checkpoints] == [(4, 1), (8, 2)]
        assert checkpoints[-1]["path"].endswith("checkpoint-8")
        assert checkpoints[-1]["kind"] == "dir"
        download = http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
        assert download.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(download.content)) as tar:
            names = {Path(n).name for n in tar.getnames()}
        assert {"model.safetensors", "trainer_state.json"} <= names
    assert wait_until(lambda: job_processes(job_id) == [], timeout=10)


def test_lightning_logger_reports_registers_and_resumes(sqlite_stack: Stack) -> None:
    """Lightning is the job's own requirement, as transformers is above."""
    with sqlite_stack.client() as http:
        code_id = upload(http, EXAMPLES / "lightning_logger.py")
        spec = {
            "name": "lightning-logger",
            "code": {"code_id": code_id, "entrypoint": "lightning_logger.py"},
            "launcher": "torchrun",
            "nproc_per_node": 2,
            "device": "cpu",
            "environment": {"requirements": ["lightning==2.5.6"]},
            "args": ["--epochs", "3", "--fail-at-epoch", "2"],
            "max_retries": 1,
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        job = sqlite_stack.wait_for_state(http, job_id, {"succeeded"}, timeout=300)
        assert job["attempt"] == 2, "the first attempt failed on purpose as epoch 2 started"
        assert "resuming from epoch=1-step=8.ckpt" in log_text(http, job_id, 0)

        points = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 10_000}).json()["items"]
        # 4 steps per epoch (256 samples, batches of 32, split over 2 ranks), 3 epochs.
        assert {p["step"] for p in points if p["name"] == "loss"} == set(range(0, 12))
        checkpoints = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
        assert [(c["step"], c["epoch"], c["attempt"]) for c in checkpoints] == [
            (4, 0, 1),
            (8, 1, 1),
            (12, 2, 2),
        ]
        download = http.get(f"/v1/jobs/{job_id}/checkpoints/latest/download")
        assert download.status_code == 200
        state = torch.load(io.BytesIO(download.content), map_location="cpu", weights_only=False)
        assert set(state["state_dict"]) == {"layer.weight", "layer.bias"}
    assert wait_until(lambda: job_processes(job_id) == [], timeout=10)
