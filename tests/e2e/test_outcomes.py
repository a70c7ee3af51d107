"""Truthful outcomes of programs run as their authors wrote them, on 2 CPU ranks of a real worker
(tests/e2e/programs/outcomes/, each saying where its shape comes from): the Trainer, Lightning
and accelerate examples train as one process group; what never trained as one group, or
recorded nothing, ends `succeeded` with warnings; a CUDA-only program fails saying the worker
has no CUDA; a hostile program cannot pass its ranks off as one group; a mistyped best_metric
deletes no checkpoint. Every job is submitted at once to one module-scoped stack, and each test
checks its own."""

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import stack_of_its_own
from tests.e2e.test_launch_styles import log_text, upload
from tests.support.procs import job_processes, wait_until
from tests.support.stack import Stack

PROGRAMS = Path(__file__).resolve().parent / "programs" / "outcomes"
TORCHRUN = {"launcher": "torchrun", "nproc_per_node": 2, "device": "cpu"}
PYTHON = {"launcher": "python", "nproc_per_node": 2, "device": "cpu"}
GROUP_WARNING = "never trained as one process group of WORLD_SIZE=2"
NOTHING_WARNING = "the job ran to its end but recorded nothing"

JOBS: dict[str, dict[str, Any]] = {
    "trainer": {
        "entrypoint": "trainer_docs.py",
        **TORCHRUN,
        "environment": {"requirements": ["transformers==4.57.1"]},
    },
    "lightning": {
        "entrypoint": "lightning_docs.py",
        **TORCHRUN,
        "environment": {"requirements": ["lightning==2.5.6"]},
    },
    "accelerate": {
        "entrypoint": "accelerate_by_feature.py",
        **TORCHRUN,
        "args": ["--checkpointing_steps", "epoch"],
    },
    # The same program where the job's env undoes what Launchbay sets: a group of 2 is formed,
    # and each rank trains a copy of its own on it (no collective).
    "accelerate-alone": {
        "entrypoint": "accelerate_by_feature.py",
        **TORCHRUN,
        "args": ["--checkpointing_steps", "epoch"],
        "env": {"ACCELERATE_USE_CPU": "0"},
    },
    "tutorial-spawn": {"entrypoint": "ddp_tutorial_spawn.py", **PYTHON},
    "dist-tuto": {"entrypoint": "dist_tuto.py", **PYTHON},
    "cuda-only": {"entrypoint": "cuda_only_spawn.py", **PYTHON},
    "no-gpus": {"entrypoint": "no_gpus_exit0.py", **PYTHON, "nproc_per_node": 1},
    "fakes-a-group": {
        "entrypoint": "fakes_a_group.py",
        **TORCHRUN,
        "checkpoint": {"keep_last": 1, "best_metric": "acc", "best_mode": "max"},
    },
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with stack_of_its_own(tmp_path_factory.mktemp("outcomes")) as running:
        yield running


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


@pytest.fixture(scope="module")
def jobs(http: httpx.Client) -> dict[str, str]:
    """Every job of `JOBS` submitted, by name: the worker runs them one after another while
    the tests wait for theirs."""
    submitted, uploaded = {}, {}
    for name, fields in JOBS.items():
        fields = dict(fields)
        if name.startswith("accelerate") and importlib.util.find_spec("accelerate") is None:
            continue
        entrypoint = fields.pop("entrypoint")
        if entrypoint not in uploaded:
            uploaded[entrypoint] = upload(http, PROGRAMS / entrypoint)
        spec = {"name": name, "code": {"code_id": uploaded[entrypoint], "entrypoint": entrypoint}}
        response = http.post("/v1/jobs", json={**spec, **fields})
        assert response.status_code == 201, response.text
        submitted[name] = response.json()["id"]
    return submitted


def ended(stack: Stack, http: httpx.Client, jobs: dict[str, str], name: str) -> dict[str, Any]:
    if name not in jobs:
        pytest.skip("accelerate is not installed")
    job = stack.wait_for_state(
        http, jobs[name], {"succeeded", "failed", "cancelled"}, timeout=600, interval=0.5
    )
    assert wait_until(lambda: job_processes(jobs[name]) == [], timeout=10)
    return job


def artifact_paths(http: httpx.Client, job_id: str) -> list[str]:
    return [a["path"] for a in http.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]]


def test_the_trainer_and_lightning_examples_train_as_one_group(
    stack: Stack, http: httpx.Client, jobs: dict[str, str]
) -> None:
    trainer = ended(stack, http, jobs, "trainer")
    assert (trainer["state"], trainer["warnings"]) == ("succeeded", []), trainer["message"]
    # 64 samples, 4 per rank and step: 8 steps shared by 2 ranks (16 for a rank alone).
    paths = artifact_paths(http, trainer["id"])
    saved = {part for p in paths for part in p.split("/") if part.startswith("checkpoint-")}
    assert "checkpoint-8" in saved and "checkpoint-16" not in saved, saved

    lightning = ended(stack, http, jobs, "lightning")
    assert (lightning["state"], lightning["warnings"]) == ("succeeded", []), lightning["message"]
    # One logger (rank 0's) and 32 of the 64 samples per rank: not a version per rank of 64.
    checkpoints = [p for p in artifact_paths(http, lightning["id"]) if p.endswith(".ckpt")]
    assert checkpoints == ["lightning_logs/version_0/checkpoints/epoch=0-step=32.ckpt"]


def test_accelerate_trains_as_one_group_unless_told_otherwise(
    stack: Stack, http: httpx.Client, jobs: dict[str, str]
) -> None:
    grouped = ended(stack, http, jobs, "accelerate")
    assert (grouped["state"], grouped["warnings"]) == ("succeeded", []), grouped["message"]
    # 96 samples in batches of 16 over 2 ranks: 3 steps an epoch; only the main process prints.
    assert "epoch 1: {'mse'" in log_text(http, grouped["id"], 0)
    assert "'steps': 6}" in log_text(http, grouped["id"], 0)
    assert "epoch" not in log_text(http, grouped["id"], 1)

    alone = ended(stack, http, jobs, "accelerate-alone")
    assert alone["state"] == "succeeded" and alone["exit_reason"] == "completed"
    [warning] = alone["warnings"]
    assert GROUP_WARNING in warning
    assert "rank 0: rank 0 of a group of 2 that ran no collective" in warning
    assert "rank 1: rank 1 of a group of 2 that ran no collective" in warning
    # Each rank was its own main process and ran every step.
    assert "'steps': 12}" in log_text(http, alone["id"], 1)


def test_a_spawn_of_no_process_and_a_script_that_finds_no_gpu_carry_warnings(
    stack: Stack, http: httpx.Client, jobs: dict[str, str]
) -> None:
    spawned_none = ended(stack, http, jobs, "tutorial-spawn")
    assert spawned_none["state"] == "succeeded", spawned_none
    group, nothing = spawned_none["warnings"]
    assert group.startswith("WORLD_SIZE=2, but no process of the job ran in a process group")
    assert nothing.startswith(NOTHING_WARNING)

    no_gpus = ended(stack, http, jobs, "no-gpus")
    assert no_gpus["state"] == "succeeded", no_gpus
    [warning] = no_gpus["warnings"]
    assert warning.startswith(NOTHING_WARNING)
    # The line it printed last names why, cut short: it wrote 50,000 characters after it.
    assert "'Unable to locate sufficient 2 gpus to run this example. Exiting.!!!" in warning
    assert warning.endswith("!...'") and len(warning) <= 500

    listed = http.get("/v1/jobs", params={"limit": 100}).json()["items"]
    assert {j["id"]: j["warnings"] for j in listed}[no_gpus["id"]] == [warning]


def test_a_python_launcher_s_processes_log_as_their_own_ranks(
    stack: Stack, http: httpx.Client, jobs: dict[str, str]
) -> None:
    tuto = ended(stack, http, jobs, "dist-tuto")
    assert tuto["state"] == "succeeded", tuto
    assert "Rank  0  has data  tensor(1.)" in log_text(http, tuto["id"], 0)
    assert "Rank  1  has data  tensor(1.)" in log_text(http, tuto["id"], 1)
    assert "Rank  1" not in log_text(http, tuto["id"], 0)
    # It formed a group of 2 and communicated: only that it recorded nothing is said.
    assert [w[: len(NOTHING_WARNING)] for w in tuto["warnings"]] == [NOTHING_WARNING]


def test_a_cuda_only_program_fails_saying_the_worker_has_no_cuda(
    stack: Stack, http: httpx.Client, jobs: dict[str, str]
) -> None:
    job = ended(stack, http, jobs, "cuda-only")
    assert (job["state"], job["exit_reason"]) == ("failed", "user_error"), job
    assert job["message"].startswith("the program needs CUDA, but this worker has no CUDA")
    assert "_cuda_setDevice" in job["message"]
    # mp.spawn's processes each logged under their own rank.
    assert "starting rank 0" in log_text(http, job["id"], 0)
    assert "starting rank 1" in log_text(http, job["id"], 1)


def test_a_program_cannot_pass_its_ranks_off_as_one_group_nor_lose_its_best(
    stack: Stack, http: httpx.Client, jobs: dict[str, str]
) -> None:
    job = ended(stack, http, jobs, "fakes-a-group")
    assert job["state"] == "succeeded", job
    group, best = job["warnings"]
    # Rank 0 wrote both records (one process for two ranks): neither counts.
    assert GROUP_WARNING in group
    assert "rank 0: no process group; rank 1: no process group" in group
    assert "process group of 2 formed" in log_text(http, job["id"], 1), "its lines say otherwise"
    assert best.startswith("best_metric 'acc' was never reported by a checkpoint")
    assert "the nearest reported name is 'accuracy'" in best
    assert "and 37 more" in best and len(best) <= 500
    # keep_last 1, and the best by `acc` unknown: no checkpoint deleted for not being it.
    checkpoints = http.get(f"/v1/jobs/{job['id']}/checkpoints").json()["items"]
    assert [c["step"] for c in checkpoints] == [1, 2, 3]
    assert "2000 invalid events-file line(s) skipped" in job["message"]
