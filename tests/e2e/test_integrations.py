"""Framework integrations in real 2-rank gloo jobs on CPU, driven over HTTP: metrics, checkpoints
registered and downloaded, and a retried attempt resuming from the last one.

- Programs that add Launchbay's integration themselves (`LaunchbayTracker`, `LaunchbayCallback`,
  `LaunchbayLogger`: examples/integrations/), with capture on (the default): nothing twice.
- Capture without edits (`capture: auto`): programs written as their frameworks' docs write
  them, with nothing of Launchbay in them (`programs/capture_*.py`, each saying whose example it
  follows and what it does that the example does not: the fault the test injects); they write
  to their working directory, as published;
  a rank killed after a checkpoint, the retried attempt resumes from it (optimizer, scheduler
  and RNG included). transformers and Lightning come with TensorBoard, so their default
  TensorBoard loggers write files too: what the framework reports is not read again from them.
  A million TensorBoard scalars meet the job's limit (set low here); `log_metrics` that could
  not be matched safely are refused; `capture: off` is off.

One stack for the module (SQLite: the database is not the point), so jobs with the same
requirements share one environment. accelerate is a development dependency
(requirements-dev.lock); transformers and Lightning are the jobs' own requirements (from PyPI,
through the worker's uv and its cache): Launchbay imports no framework.
"""

import importlib.util
import io
import tarfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from tests.e2e.conftest import stack_of_its_own
from tests.e2e.test_launch_styles import log_text
from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack

PROGRAMS = Path(__file__).resolve().parent / "programs"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "integrations"
TRANSFORMERS = ["transformers==4.57.1", "tensorboard==2.21.0"]
LIGHTNING = ["lightning==2.5.6", "tensorboard==2.21.0"]
TENSORBOARD_LIMIT = 20_000
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("integrations")
    limit = str(TENSORBOARD_LIMIT)
    with stack_of_its_own(root, LAUNCHBAY_TENSORBOARD_MAX_POINTS=limit) as running:
        yield running


def upload(http: httpx.Client, path: Path) -> str:
    """The program's code id (uploaded again by a later test: the same id, 200)."""
    with path.open("rb") as handle:
        answer = http.post("/v1/code", files={"file": (path.name, handle, "text/x-python")})
    assert answer.status_code in (200, 201), answer.text
    code_id: str = answer.json()["code_id"]
    return code_id


def run_job(stack: Stack, http: httpx.Client, program: str, **spec: Any) -> dict[str, Any]:
    """Upload `program`, submit it (2 ranks on CPU unless `spec` says otherwise), wait for the
    end, and check that no process of it is left."""
    path = PROGRAMS / program if (PROGRAMS / program).exists() else EXAMPLES / program
    code_id = upload(http, path)
    body = {
        "name": program.removesuffix(".py"),
        "code": {"code_id": code_id, "entrypoint": program},
        "nproc_per_node": 2,
        "device": "cpu",
        **spec,
    }
    response = http.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = stack.wait_for_state(
        http, response.json()["id"], {"succeeded", "failed", "cancelled"}, timeout=TIMEOUT_S
    )
    assert wait_until(lambda: job_processes(job["id"]) == [], timeout=10)
    return job


def points(http: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = 0
    while True:
        params = {"limit": 10_000, "after": after}
        page = http.get(f"/v1/jobs/{job_id}/metrics", params=params).json()
        items += page["items"]
        if not page["items"]:
            return items
        after = page["next_after"]


def by_name(found: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    named: dict[str, list[dict[str, Any]]] = {}
    for point in found:
        named.setdefault(point["name"], []).append(point)
    return named


def assert_each_step_once(found: list[dict[str, Any]]) -> None:
    """No metric has two points at one step: nothing recorded twice, across attempts too."""
    twice = {
        (name, step): n
        for name, series in by_name(found).items()
        for step, n in Counter(p["step"] for p in series).items()
        if n > 1
    }
    assert twice == {}


def checkpoints(http: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = http.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    return items


def tar_names(http: httpx.Client, job_id: str, ref: str) -> set[str]:
    download = http.get(f"/v1/jobs/{job_id}/checkpoints/{ref}/download")
    assert download.status_code == 200, download.text
    with tarfile.open(fileobj=io.BytesIO(download.content)) as tar:
        return {Path(name).name for name in tar.getnames()}


@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason="no accelerate")
def test_accelerate_tracker_reports_saves_and_resumes(stack: Stack) -> None:
    with stack.client() as http:
        job = run_job(
            stack,
            http,
            "accelerate_tracker.py",
            env={"ACCELERATE_USE_CPU": "1"},
            args=["--epochs", "3", "--fail-after-epoch", "2"],
            max_retries=1,
        )
        assert (job["state"], job["attempt"]) == ("succeeded", 2), "failed once on purpose"
        assert "resumed from epoch 2 (step 8)" in log_text(http, job["id"], 0)

        found = points(http, job["id"])
        losses = [p for p in found if p["name"] == "loss"]
        # 4 steps per epoch (256 samples, batches of 32, split over 2 ranks): epochs 1-2 by
        # the first attempt, 3 by the second; each step reported once, by the main process.
        assert sorted(p["step"] for p in losses) == list(range(1, 13))
        assert {p["epoch"] for p in losses} == {0, 1, 2}, "the float epoch's whole part"
        assert {p["value"] for p in found if p["name"] == "epoch"} == {0.5, 1.5, 2.5}
        assert_each_step_once(found)  # the program's tracker, and not capture's beside it

        saved = checkpoints(http, job["id"])
        assert [(c["step"], c["attempt"]) for c in saved][-1] == (12, 2)
        download = http.get(f"/v1/jobs/{job['id']}/checkpoints/latest/download")
        assert download.status_code == 200
        state = torch.load(io.BytesIO(download.content), map_location="cpu", weights_only=True)
        assert set(state["model"]) == {"weight", "bias"}


def test_trainer_callback_reports_registers_and_resumes(stack: Stack) -> None:
    assert importlib.util.find_spec("transformers") is None, "a job's package, not the worker's"
    with stack.client() as http:
        job = run_job(
            stack,
            http,
            "trainer_tiny_bert.py",
            env={"ACCELERATE_USE_CPU": "1"},
            environment={"requirements": TRANSFORMERS},
            args=["--max-steps", "8", "--save-steps", "4", "--fail-at-step", "4"],
            max_retries=1,
        )
        assert (job["state"], job["attempt"]) == ("succeeded", 2), "failed once after step 4"
        assert "resuming from checkpoint-4" in log_text(http, job["id"], 0)

        found = points(http, job["id"])
        names = {p["name"] for p in found}
        assert {"loss", "learning_rate", "eval_loss", "eval_accuracy", "epoch"} <= names
        # Each once: the program's own callback reports, capture's is not added beside it.
        assert sorted(p["step"] for p in found if p["name"] == "loss") == list(range(1, 9))
        assert sorted(p["step"] for p in found if p["name"] == "eval_loss") == [4, 8]

        saved = checkpoints(http, job["id"])
        assert [(c["step"], c["attempt"]) for c in saved] == [(4, 1), (8, 2)]
        assert saved[-1]["path"].endswith("checkpoint-8")
        assert saved[-1]["kind"] == "dir"
        # The whole state, loaded by the second attempt on CPU ranks (map_location "cpu:0").
        assert {"model.safetensors", "trainer_state.json", "optimizer.pt", "scheduler.pt"} <= (
            names := tar_names(http, job["id"], "latest")
        )
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= names


def test_lightning_logger_reports_registers_and_resumes(stack: Stack) -> None:
    with stack.client() as http:
        job = run_job(
            stack,
            http,
            "lightning_logger.py",
            environment={"requirements": LIGHTNING},
            args=["--epochs", "3", "--fail-at-epoch", "2"],
            max_retries=1,
        )
        assert (job["state"], job["attempt"]) == ("succeeded", 2), "failed once as epoch 2 began"
        assert "resuming from epoch=1-step=8.ckpt" in log_text(http, job["id"], 0)

        found = points(http, job["id"])
        # 4 steps per epoch (256 samples, batches of 32, split over 2 ranks), 3 epochs.
        assert sorted(p["step"] for p in found if p["name"] == "loss") == list(range(12))
        saved = checkpoints(http, job["id"])
        assert [(c["step"], c["epoch"], c["attempt"]) for c in saved] == [
            (4, 0, 1),
            (8, 1, 1),
            (12, 2, 2),
        ]
        download = http.get(f"/v1/jobs/{job['id']}/checkpoints/latest/download")
        assert download.status_code == 200
        state = torch.load(io.BytesIO(download.content), map_location="cpu", weights_only=False)
        assert set(state["state_dict"]) == {"layer.weight", "layer.bias"}


def test_an_unmodified_trainer_is_recorded_and_resumes_from_its_full_checkpoint(
    stack: Stack,
) -> None:
    with stack.client() as http:
        job = run_job(
            stack,
            http,
            "capture_trainer.py",
            env={"ACCELERATE_USE_CPU": "1", "KILL_RANK_AFTER_SAVE": "1"},
            environment={"requirements": TRANSFORMERS},
            max_retries=1,
        )
        assert (job["state"], job["attempt"]) == ("succeeded", 2), job
        assert "resuming Trainer from checkpoint-16" in log_text(http, job["id"], 0)

        saved = checkpoints(http, job["id"])
        assert [(c["step"], c["epoch"], c["attempt"], c["kind"]) for c in saved] == [
            (16, 1, 1, "dir"),
            (32, 2, 2, "dir"),
            (48, 3, 2, "dir"),
        ]
        assert saved[0]["path"].endswith("/checkpoint-16")
        # The full checkpoint: optimizer, scheduler, and each rank's RNG state.
        assert {
            "model.safetensors",
            "optimizer.pt",
            "scheduler.pt",
            "rng_state_0.pth",
            "rng_state_1.pth",
            "trainer_state.json",
        } <= tar_names(http, job["id"], saved[0]["id"])

        found = points(http, job["id"])
        named = by_name(found)
        assert {"loss", "learning_rate", "grad_norm", "eval_loss", "eval_accuracy"} <= set(named)
        assert not any(name.startswith(("train/", "eval/")) for name in named), "TensorBoard's copy"
        assert_each_step_once(found)
        loss = named["loss"]
        assert [p["step"] for p in loss] == list(range(4, 49, 4))
        # The second attempt went on from step 16: it did not start over.
        assert {p["attempt"] for p in loss if p["step"] <= 16} == {1}
        assert {p["attempt"] for p in loss if p["step"] > 16} == {2}
        assert [p["step"] for p in named["eval_loss"]] == [16, 32, 48]


def test_an_unmodified_lightning_program_is_recorded_and_resumes(stack: Stack) -> None:
    with stack.client() as http:
        job = run_job(
            stack,
            http,
            "capture_lightning.py",
            env={"KILL_RANK_AT_EPOCH": "2"},
            environment={"requirements": LIGHTNING},
            max_retries=1,
        )
        assert (job["state"], job["attempt"]) == ("succeeded", 2), job
        assert "resuming Lightning from epoch=1-step=32.ckpt" in log_text(http, job["id"], 0)

        saved = checkpoints(http, job["id"])
        # One a step: save_last=True saves the same state again as last.ckpt.
        assert [(Path(c["path"]).name, c["step"], c["epoch"], c["attempt"]) for c in saved] == [
            ("epoch=0-step=16.ckpt", 16, 0, 1),
            ("epoch=1-step=32.ckpt", 32, 1, 1),
            ("epoch=2-step=48.ckpt", 48, 2, 2),
        ]
        download = http.get(f"/v1/jobs/{job['id']}/checkpoints/latest/download")
        state = torch.load(io.BytesIO(download.content), map_location="cpu", weights_only=False)
        assert set(state["state_dict"]) == {"layer.weight", "layer.bias"}
        assert state["global_step"] == 48

        found = points(http, job["id"])
        named = by_name(found)
        assert {"train_loss", "valid_loss"} <= set(named)
        assert_each_step_once(found)  # TensorBoard's copy (same names) would repeat each step
        steps = {p["attempt"]: [] for p in named["train_loss"]}
        for point in named["train_loss"]:
            steps[point["attempt"]].append(point["step"])
        assert max(steps[1]) < 32 < min(steps[2]), steps


def test_an_unmodified_accelerate_program_resumes_with_steps_that_go_on(stack: Stack) -> None:
    """accelerate's example loop runs again from its own start in the resumed attempt (its
    state loaded): its steps (`step=epoch`) count on from the checkpoint's. What it prints is
    read by `log_metrics`."""
    printed = r"epoch (?P<epoch>\d+): \{'accuracy': (?P<printed_accuracy>[0-9.]+)"
    with stack.client() as http:
        job = run_job(
            stack,
            http,
            "capture_accelerate.py",
            args=["--cpu", "--with_tracking", "--checkpointing_steps", "epoch"],
            env={"ACCELERATE_USE_CPU": "1", "KILL_RANK_AT_EPOCH": "2"},
            log_metrics=[printed],
            max_retries=1,
            checkpoint={"keep_last": 5},
        )
        assert (job["state"], job["attempt"]) == ("succeeded", 2), job
        assert "resumed accelerate's state from epoch_1 (load_state)" in log_text(
            http, job["id"], 0
        )

        found = points(http, job["id"])
        named = by_name(found)
        accuracy = [(p["step"], p["attempt"]) for p in named["accuracy"]]
        assert accuracy == [(0, 1), (1, 1), (2, 2), (3, 2), (4, 2)]
        assert_each_step_once([p for p in found if p["step"] is not None])
        # The retry's loop starts over at epoch_0 (its steps go on): saved again under the
        # first attempt's name, it replaces that one, as it does in the program's directory.
        saved = checkpoints(http, job["id"])
        assert [(Path(c["path"]).name, c["step"], c["attempt"]) for c in saved] == [
            ("epoch_1", 1, 1),
            ("epoch_0", 2, 2),
            ("epoch_1.2", 3, 2),  # beside the resumed epoch_1, restored where it was saved
            ("epoch_2", 4, 2),
        ]
        assert {
            "model.safetensors",
            "optimizer.bin",
            "scheduler.bin",
            "random_states_0.pkl",
            "random_states_1.pkl",
        } <= tar_names(http, job["id"], saved[0]["id"])
        # What rank 0 printed, at the epoch the line names (no step: the pattern gives none).
        lines = [(p["epoch"], p["attempt"], p["step"]) for p in named["printed_accuracy"]]
        assert lines == [(0, 1, None), (1, 1, None), (0, 2, None), (1, 2, None), (2, 2, None)]


def watch_api(http: httpx.Client, job_id: str, stop: threading.Event, took: list[float]) -> None:
    while not stop.is_set():
        for path in ("/v1/health", f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/metrics"):
            asked = time.monotonic()
            params = {"max_points": 100} if path.endswith("metrics") else {}
            try:
                answer = http.get(path, params=params, timeout=10)
            except httpx.TimeoutException:
                took.append(99.0)
                continue
            took.append(time.monotonic() - asked if answer.status_code == 200 else 99.0)
        stop.wait(0.2)


def test_tensorboard_scalars_are_metrics_and_a_flood_stays_within_the_limit(
    stack: Stack,
) -> None:
    """PyTorch's SummaryWriter example, then a file of a million scalars: the first are recorded
    at their step and wall time, the flood up to the job's limit; the API answers meanwhile."""
    with stack.client() as http:
        code_id = upload(http, PROGRAMS / "capture_tensorboard.py")
        spec = {
            "name": "tensorboard-flood",
            "code": {"code_id": code_id, "entrypoint": "capture_tensorboard.py"},
            "nproc_per_node": 1,
            "device": "cpu",
            "env": {"FLOOD_SCALARS": "1000000"},
            "environment": {"requirements": ["tensorboard==2.21.0"]},
        }
        response = http.post("/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        stop, took = threading.Event(), []
        with stack.client() as other:
            watcher = threading.Thread(target=watch_api, args=(other, job_id, stop, took))
            watcher.start()
            try:
                job = stack.wait_for_state(http, job_id, {"succeeded", "failed"}, timeout=TIMEOUT_S)
            finally:
                stop.set()
                watcher.join()
        assert job["state"] == "succeeded", job
        # Each answer within seconds while the flood is read (3.07 s seen once with three test
        # processes on two cores); an API the flood blocked would wait for the whole of it.
        assert took and max(took) < 8.0, sorted(took)[-5:]
        assert "past the job's limit of 20000 are not recorded" in log_text(http, job_id, 0)

        found = points(http, job_id)
        assert len(found) == TENSORBOARD_LIMIT
        named = by_name(found)
        docs = ["Loss/train", "Loss/test", "Accuracy/train", "Accuracy/test"]
        docs += ["run_14h/xsinx", "run_14h/xcosx", "run_14h/tanx"]
        for name in docs:
            assert [p["step"] for p in named[name]] == list(range(100)), name
        # Each point's time is the scalar's wall time, which the program wrote in order.
        times = [p["ts"] for p in named["Loss/train"]]
        assert times == sorted(times) and len(set(times)) == 100
        flood = [p for p in found if p["name"].startswith("flood/")]
        assert len(flood) == TENSORBOARD_LIMIT - 700
        assert wait_until(lambda: job_processes(job_id) == [], timeout=10)


def test_capture_off_records_nothing_the_program_did_not_report(stack: Stack) -> None:
    with stack.client() as http:
        job = run_job(
            stack,
            http,
            "capture_tensorboard.py",
            nproc_per_node=1,
            environment={"requirements": ["tensorboard==2.21.0"]},
            capture="off",
        )
        assert job["state"] == "succeeded", job
        assert points(http, job["id"]) == []
        assert "reported no metric" in (job["message"] or "")
        assert "[launchbay] capture" not in log_text(http, job["id"], 0)


@pytest.mark.parametrize(
    ("patterns", "capture", "said"),
    [
        ([r"loss=(?P<loss>\d+)\1"], "auto", "backreferences"),  # needs backtracking
        ([r"(?P<loss>a{1,100}){1,100}"], "auto", "repeat counts to at most 1000"),
        ([r"(?P<loss>(?=x)a)"], "auto", "lookahead"),
        ([r"step (?P<step>\d+)"], "auto", "names no metric"),
        ([r"loss=(?P<loss>\S+)"], "off", "needs capture 'auto'"),
    ],
)
def test_log_metrics_that_cannot_be_matched_safely_are_refused(
    stack: Stack, patterns: list[str], capture: str, said: str
) -> None:
    spec = {"name": "x", "recipe": "synthetic", "log_metrics": patterns, "capture": capture}
    with stack.client() as http:
        answer = http.post("/v1/jobs", json=spec)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["code"] == "validation_error"
        assert said in str(error["detail"]) + error["message"]
        assert http.get("/v1/jobs", params={"name": "x"}).json()["items"] == []
