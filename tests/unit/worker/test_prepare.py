"""Checks before a launch, the copy of uploaded code, and torchrun's restart directories."""

import os
from pathlib import Path

import pytest

from jobs.spec import JobSpec
from worker import devices
from worker.devices import WorkerDevices
from worker.prepare import CudaInfo, LaunchProblem, check_resources, prepare_code, recipe_module
from worker.process_tree import elastic_restart_count

CODE_ID = "cd" * 32


def spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"name": "t", "code": {"code_id": CODE_ID}, **fields})


@pytest.fixture(autouse=True)
def unassigned(monkeypatch: pytest.MonkeyPatch) -> None:
    """No devices assigned (a job run outside `launchbay worker`), 4 usable cores."""
    monkeypatch.setattr(devices, "_assigned", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)


@pytest.mark.parametrize(
    ("fields", "cuda", "problem"),
    [
        ({"device": "cuda"}, CudaInfo(False, 0), "no CUDA device"),
        ({"backend": "nccl"}, CudaInfo(False, 0), "backend=nccl"),
        (
            {"nproc_per_node": 4},
            CudaInfo(True, 2),
            r"^nproc_per_node=4, but this worker has 2 device\(s\) \(0,1\): set nproc_per_node: 2 ",
        ),
        ({"nproc_per_node": 5}, CudaInfo(False, 0), r"nproc_per_node=5, .* 4 CPU slot\(s\): "),
        ({"device": "cpu", "nproc_per_node": 2}, CudaInfo(True, 1), "has 1 device"),
        ({"launcher": "python", "nproc_per_node": 3}, CudaInfo(True, 2), "nproc_per_node=3"),
    ],
)
def test_resource_problems(fields: dict[str, object], cuda: CudaInfo, problem: str) -> None:
    with pytest.raises(LaunchProblem, match=problem):
        check_resources(spec(**fields), cuda)


def test_the_default_two_ranks_on_a_one_gpu_worker_say_what_to_set() -> None:
    with pytest.raises(LaunchProblem) as problem:
        check_resources(spec(), CudaInfo(True, 1))
    assert str(problem.value) == (
        "nproc_per_node=2 (the default, for a spec that does not set it), but this worker has "
        "1 device(s) (0): set nproc_per_node: 1 (or fewer) in the job spec, or submit it to a "
        "queue whose workers have 2 or more"
    )


def test_resources_that_fit() -> None:
    check_resources(spec(nproc_per_node=4), CudaInfo(False, 0))
    check_resources(spec(nproc_per_node=2), CudaInfo(True, 2))
    check_resources(spec(device="cpu", nproc_per_node=1), CudaInfo(True, 1))
    check_resources(spec(nnodes=2, nproc_per_node=2), CudaInfo(True, 2))  # multi-node: allowed


def test_the_assigned_devices_limit_the_ranks() -> None:
    devices.assign_devices(WorkerDevices(gpus=("2", "3")))
    check_resources(spec(nproc_per_node=2), CudaInfo(False, 0))  # no CUDA: ranks on CPU
    with pytest.raises(LaunchProblem, match=r"nproc_per_node=3, .* 2 device\(s\) \(2,3\): "):
        check_resources(spec(nproc_per_node=3), CudaInfo(False, 0))
    devices.assign_devices(WorkerDevices(cpu_slots=8))
    check_resources(spec(nproc_per_node=8, launcher="python"), CudaInfo(False, 0))
    with pytest.raises(LaunchProblem, match=r"nproc_per_node=9, .* 8 CPU slot\(s\): "):
        check_resources(spec(nproc_per_node=9), CudaInfo(False, 0))


def test_unknown_recipe() -> None:
    with pytest.raises(LaunchProblem, match="unknown recipe"):
        recipe_module("no-such-recipe")


def test_code_directory_is_copied(tmp_path: Path) -> None:
    upload = tmp_path / "code" / CODE_ID
    (upload / "pkg").mkdir(parents=True)
    (upload / "train.py").write_text("print(1)\n")
    (upload / "pkg" / "util.py").write_text("X = 1\n")
    target = tmp_path / "run" / "code"

    assert prepare_code(tmp_path / "code", CODE_ID, target, "train.py") == target / "train.py"
    assert (target / "pkg" / "util.py").read_text() == "X = 1\n"
    with pytest.raises(LaunchProblem, match="entrypoint 'pkg' is not a file"):
        prepare_code(tmp_path / "code", CODE_ID, tmp_path / "other", "pkg")


def test_single_file_upload_and_missing_code(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / CODE_ID).write_text("print(1)\n")
    target = tmp_path / "run" / "code"
    assert prepare_code(tmp_path / "code", CODE_ID, target, "main.py").read_text() == "print(1)\n"
    with pytest.raises(LaunchProblem, match="not on this worker"):
        prepare_code(tmp_path / "code", "ef" * 32, target, "main.py")


def test_elastic_restart_count(tmp_path: Path) -> None:
    assert elastic_restart_count(tmp_path / "missing") == 0
    for name in ("attempt_0", "attempt_2", "attempt_1", "other"):
        (tmp_path / "job-1_abc" / name).mkdir(parents=True)
    assert elastic_restart_count(tmp_path) == 2
