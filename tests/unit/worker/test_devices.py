"""What devices a worker owns: `--gpus`, the defaults, and GPUs shared on one host."""

import os

import pytest

from worker import devices
from worker.devices import (
    CudaInfo,
    DevicesTaken,
    WorkerDevices,
    check_gpus_seen,
    choose_devices,
    default_devices,
    find_gpu_conflicts,
    parse_gpu_ids,
    worker_devices,
)


@pytest.fixture(autouse=True)
def unassigned(monkeypatch: pytest.MonkeyPatch) -> None:
    """No devices assigned and no CUDA_VISIBLE_DEVICES, restored after each test."""
    monkeypatch.setattr(devices, "_assigned", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("0,1", ("0", "1")),
        (" 2 , 3 ", ("2", "3")),
        ("GPU-abc,MIG-def", ("GPU-abc", "MIG-def")),
        ("7", ("7",)),
    ],
)
def test_parse_gpu_ids(text: str, ids: tuple[str, ...]) -> None:
    assert parse_gpu_ids(text) == ids


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "at least one CUDA device id"),
        (" , ", "at least one CUDA device id"),
        ("0,,1", "'0,,1' has an empty device id"),
        ("0,1,", "has an empty device id"),
        ("0,1,0", "names device 0 more than once"),
    ],
)
def test_parse_gpu_ids_refuses(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_gpu_ids(text)


def test_reported_ids_count_and_description() -> None:
    gpus = WorkerDevices(gpus=("0", "1"))
    assert (gpus.ids(), gpus.count, gpus.describe()) == (["0", "1"], 2, "2 device(s) (0,1)")
    cpu = WorkerDevices(cpu_slots=3)
    assert (cpu.ids(), cpu.count, cpu.describe()) == (
        ["cpu:0", "cpu:1", "cpu:2"],
        3,
        "3 CPU slot(s)",
    )


@pytest.mark.parametrize(
    ("cuda", "visible", "gpus"),
    [
        (CudaInfo(True, 2), None, ("0", "1")),
        (CudaInfo(True, 2), "3,5", ("3", "5")),
        (CudaInfo(True, 1), "GPU-abc", ("GPU-abc",)),
        (CudaInfo(True, 1), "4,6", ("4",)),
    ],
)
def test_default_is_the_visible_cuda_devices(
    cuda: CudaInfo, visible: str | None, gpus: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert default_devices(cuda) == WorkerDevices(gpus=gpus)


def test_default_without_cuda_is_a_slot_per_usable_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    assert default_devices(CudaInfo(False, 0)) == WorkerDevices(cpu_slots=3)


def test_given_gpus_become_the_visible_devices() -> None:
    assert choose_devices(("2", "3"), None) == WorkerDevices(gpus=("2", "3"))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_given_slots_and_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert choose_devices(None, 6) == WorkerDevices(cpu_slots=6)
    monkeypatch.setattr(devices, "detect_cuda", lambda: CudaInfo(True, 2))
    assert choose_devices(None, None) == WorkerDevices(gpus=("0", "1"))
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    with pytest.raises(DevicesTaken, match="not both"):
        choose_devices(("0",), 2)
    with pytest.raises(DevicesTaken, match="at least one CPU slot"):
        choose_devices(None, 0)


def test_gpus_cuda_does_not_see_are_refused() -> None:
    given = WorkerDevices(gpus=("0", "1"))
    check_gpus_seen(given, CudaInfo(True, 2))
    check_gpus_seen(given, CudaInfo(False, 0))  # no CUDA: jobs run on CPU, sized by the ids
    with pytest.raises(DevicesTaken, match="--gpus 0,1: CUDA sees only 1 of them"):
        check_gpus_seen(given, CudaInfo(True, 1))


def record(name: str, host: str, *ids: str) -> dict[str, object]:
    return {"name": name, "host": host, "devices": list(ids)}


def test_gpu_conflicts_are_with_other_workers_of_the_same_host() -> None:
    mine = WorkerDevices(gpus=("1", "2"))
    records = [
        record("me", "box", "1", "2"),  # our own record
        record("a", "box", "0", "1"),
        record("b", "box", "2", "3", "1"),
        record("c", "other-box", "1", "2"),
        record("d", "box", "3"),
        record("e", "box", "cpu:0", "cpu:1"),
        record("f", "box", "cpu"),
    ]
    assert find_gpu_conflicts(mine, "box", records, "me") == {"a": ["1"], "b": ["1", "2"]}


def test_cpu_slots_are_not_exclusive() -> None:
    mine = WorkerDevices(cpu_slots=2)
    records = [record("a", "box", "cpu:0", "cpu:1")]
    assert find_gpu_conflicts(mine, "box", records, "me") == {}


def test_assigned_devices_are_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert worker_devices(CudaInfo(False, 0)) == WorkerDevices(cpu_slots=2)
    assert worker_devices(CudaInfo(True, 1)) == WorkerDevices(gpus=("0",))
    devices.assign_devices(WorkerDevices(gpus=("4", "5")))
    assert worker_devices(CudaInfo(False, 0)) == WorkerDevices(gpus=("4", "5"))
