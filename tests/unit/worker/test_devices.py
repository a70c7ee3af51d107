"""What devices a worker owns: `--gpus`, the defaults, and GPUs shared on one host."""

import logging
import os
import sys
from pathlib import Path

import pytest

from worker import devices
from worker.devices import (
    CudaInfo,
    DevicesTaken,
    WorkerDevices,
    check_cuda_usable,
    check_gpus_seen,
    choose_devices,
    default_devices,
    find_gpu_conflicts,
    parse_gpu_ids,
    probe_cuda,
    worker_devices,
)


@pytest.fixture(autouse=True)
def unassigned(monkeypatch: pytest.MonkeyPatch) -> None:
    """No devices assigned and no CUDA_VISIBLE_DEVICES, restored after each test."""
    monkeypatch.setattr(devices, "_assigned", None)
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        monkeypatch.setenv(name, "")  # remembered, so that what a test sets is undone
        monkeypatch.delenv(name)


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
    monkeypatch.setattr(devices, "detect_cuda", lambda: CudaInfo(True, 2))
    assert choose_devices(None, None) == WorkerDevices(gpus=("0", "1"))
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    assert choose_devices(None, 6) == WorkerDevices(cpu_slots=6)
    with pytest.raises(DevicesTaken, match="not both"):
        choose_devices(("0",), 2)
    with pytest.raises(DevicesTaken, match="at least one CPU slot"):
        choose_devices(None, 0)


def test_a_cpu_worker_on_a_gpu_host_hides_the_gpus_from_the_probe_and_its_jobs() -> None:
    """`--slots 4` on a GPU host: without hiding them, CUDA would see every GPU of the host,
    `device: auto` jobs would train on them, and on GPUs that GPU workers own."""
    os.environ["CUDA_VISIBLE_DEVICES"] = "0,1,2,3"  # what the host, or a container, shows
    assert choose_devices(None, 4) == WorkerDevices(cpu_slots=4)
    visible = (
        "import os, sys; print(repr(os.environ.get('CUDA_VISIBLE_DEVICES')), file=sys.stderr); "
        "print('[false, 0, []]')"
    )
    assert probe_cuda(code=visible).error == "''"

    from jobs.runtime import env
    from jobs.spec import JobSpec
    from worker.launch import RunPaths, build_launch

    plan = build_launch(
        JobSpec(name="x", recipe="synthetic"),
        job_id="j",
        attempt=1,
        paths=RunPaths.for_attempt(Path("/data"), "j", 1),
        resume_from=None,
        cuda_available=False,
        port=29500,
        python=sys.executable,
        base_env=dict(os.environ),
        recipe_module="jobs.recipes.synthetic",
    )
    assert plan.env["CUDA_VISIBLE_DEVICES"] == ""
    assert plan.env[env.DEVICE] == "cpu"


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


def test_two_mig_instances_are_refused_with_the_reason() -> None:
    assert parse_gpu_ids("MIG-1d2b5a4e") == ("MIG-1d2b5a4e",)
    for text in ("MIG-aaa,MIG-bbb", "0,MIG-aaa,mig-bbb"):
        with pytest.raises(ValueError, match="CUDA exposes one MIG instance per process"):
            parse_gpu_ids(text)


def test_the_worker_numbers_gpus_as_nvidia_smi_does() -> None:
    choose_devices(("0",), None)
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


DRIVER_TOO_OLD = (
    "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
    "(found version 11040). Please update your GPU driver."
)


def fake_probe(stdout: str, stderr: str = "", status: int = 0) -> str:
    return (
        f"import os, sys; sys.stderr.write({stderr!r}); "
        f"print(os.environ.get('CUDA_DEVICE_ORDER'), file=sys.stderr); "
        f"print({stdout!r}); sys.exit({status})"
    )


def test_a_probe_that_finds_no_cuda_says_why_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="worker.devices"):
        info = probe_cuda(code=fake_probe("[false, 0, []]", DRIVER_TOO_OLD))
    assert (info.available, info.device_count, info.uuids) == (False, 0, ())
    assert DRIVER_TOO_OLD in info.error
    assert "PCI_BUS_ID" in info.error, "the probe numbers devices in PCI bus order"
    assert DRIVER_TOO_OLD in caplog.text


def test_a_probe_that_fails_says_why_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    crash = "ImportError: libcudart.so.12: cannot open shared object file"
    with caplog.at_level(logging.WARNING, logger="worker.devices"):
        info = probe_cuda(code=fake_probe("", crash, status=1))
    assert (info.available, info.device_count) == (False, 0)
    assert crash in info.error and crash in caplog.text


def test_the_probe_reports_the_gpus_uuids() -> None:
    answer = '[true, 2, ["6c3b0c8e-aaaa", "0e9f1c2d-bbbb"]]'
    info = probe_cuda(code=fake_probe(answer))
    assert info == CudaInfo(True, 2, ("6c3b0c8e-aaaa", "0e9f1c2d-bbbb"))


def test_the_real_probe_answers_here() -> None:
    import torch

    info = probe_cuda(sys.executable)
    assert info.available == (info.device_count > 0)
    assert len(info.uuids) in (0, info.device_count)
    if torch.version.cuda is None:  # an image built with the CPU wheels, on a GPU host too
        assert info.error == f"torch {torch.__version__} is a build without CUDA"


NO_CUDA = CudaInfo(False, 0, error=DRIVER_TOO_OLD)


@pytest.fixture
def no_driver(tmp_path: Path) -> Path:
    return tmp_path / "nvidiactl"


@pytest.mark.parametrize(
    ("gpus_given", "driver", "environ", "evidence"),
    [
        (True, False, {}, "--gpus was given"),
        (False, True, {}, "nvidiactl exists"),
        (False, False, {"NVIDIA_VISIBLE_DEVICES": "all"}, "NVIDIA_VISIBLE_DEVICES=all"),
        (False, False, {"NVIDIA_VISIBLE_DEVICES": "GPU-1234"}, "NVIDIA_VISIBLE_DEVICES=GPU-1234"),
    ],
)
def test_a_worker_that_should_have_gpus_refuses_to_start_without_cuda(
    gpus_given: bool, driver: bool, environ: dict[str, str], evidence: str, no_driver: Path
) -> None:
    if driver:
        no_driver.touch()
    with pytest.raises(DevicesTaken) as refusal:
        check_cuda_usable(
            NO_CUDA,
            gpus_given=gpus_given,
            slots_given=False,
            allow_cpu_fallback=False,
            environ=environ,
            control_device=no_driver,
        )
    message = str(refusal.value)
    assert message.startswith("CUDA is not usable, but this worker should have GPUs")
    assert evidence in message and DRIVER_TOO_OLD in message
    assert "LAUNCHBAY_ALLOW_CPU_FALLBACK=true" in message


def test_the_cpu_fallback_is_allowed_when_asked_for(
    no_driver: Path, caplog: pytest.LogCaptureFixture
) -> None:
    no_driver.touch()
    with caplog.at_level(logging.WARNING, logger="worker.devices"):
        check_cuda_usable(
            NO_CUDA,
            gpus_given=True,
            slots_given=False,
            allow_cpu_fallback=True,
            environ={},
            control_device=no_driver,
        )
    assert "running jobs on CPU, as LAUNCHBAY_ALLOW_CPU_FALLBACK allows" in caplog.text


@pytest.mark.parametrize("visible", [None, "", "void", "none", "NONE"])
def test_no_sign_of_gpus_or_a_cpu_worker_on_purpose_starts(
    visible: str | None, no_driver: Path
) -> None:
    environ = {} if visible is None else {"NVIDIA_VISIBLE_DEVICES": visible}

    def check(cuda: CudaInfo, gpus_given: bool, slots_given: bool) -> None:
        check_cuda_usable(
            cuda,
            gpus_given=gpus_given,
            slots_given=slots_given,
            allow_cpu_fallback=False,
            environ=environ,
            control_device=no_driver,
        )

    check(NO_CUDA, gpus_given=False, slots_given=False)  # a machine without GPUs
    no_driver.touch()
    check(NO_CUDA, gpus_given=False, slots_given=True)  # a GPU host, `--slots 4`: CPU on purpose
    check(CudaInfo(True, 1), gpus_given=True, slots_given=False)


def uuid_record(name: str, host: str, ids: list[str], uuids: list[str]) -> dict[str, object]:
    return {"name": name, "host": host, "devices": ids, "gpu_uuids": uuids}


def test_gpu_conflicts_are_found_by_uuid_across_host_names() -> None:
    """Containers on bridge networks have host names of their own, and a container given one
    GPU calls it 0: only the UUIDs tell whether two workers share a GPU."""
    mine = WorkerDevices(gpus=("0", "1"))
    records = [
        uuid_record("a", "container-a", ["3"], ["uuid-b"]),  # our GPU 1, seen as 3 elsewhere
        uuid_record("b", "box", ["0", "1"], ["uuid-x", "uuid-y"]),  # same ids, other GPUs
        record("c", "box", "0"),  # a record without UUIDs: compared by id on our host
        record("d", "other-box", "1"),
    ]
    conflicts = find_gpu_conflicts(mine, "box", records, "me", ("uuid-a", "uuid-b"))
    assert conflicts == {"a": ["1"], "c": ["0"]}
