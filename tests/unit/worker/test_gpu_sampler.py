"""Reading a job's GPUs: NVML (through a stand-in for `pynvml` with its functions and errors),
nvidia-smi's csv, and the choice between them on a machine without either."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobs.contract.system_metrics import gpu_metric_name, is_system_metric
from worker import gpu_sampler
from worker.gpu_sampler import GpuSample, NvmlReader, SmiReader, open_gpu_reader, parse_smi_csv
from worker.gpu_watch import job_gpus, system_points
from worker.launch import LaunchPlan


class NVMLError(Exception):
    pass


@dataclass
class Utilization:
    gpu: int


@dataclass
class Memory:
    used: int


class FakeNvml:
    """`pynvml`'s calls the reader makes, over a table of GPUs; a MIG instance has no
    utilisation or power (NVML answers NOT_SUPPORTED)."""

    NVMLError = NVMLError

    def __init__(self) -> None:
        self.gpus = {
            "0": {"util": 97, "memory": 40 << 30, "power_mw": 612_000},
            "1": {"util": 3, "memory": 1 << 30, "power_mw": 80_500},
            "MIG-abc": {"util": None, "memory": 5 << 30, "power_mw": None},
        }
        self.calls = 0
        self.shut = False

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802 - pynvml's names
        if str(index) not in self.gpus:
            raise NVMLError("invalid argument")
        return str(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        if uuid not in self.gpus:
            raise NVMLError("not found")
        return uuid

    def _get(self, handle: str, key: str) -> Any:
        self.calls += 1
        value = self.gpus[handle][key]
        if value is None:
            raise NVMLError("not supported")
        return value

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Utilization:  # noqa: N802
        return Utilization(self._get(handle, "util"))

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Memory:  # noqa: N802
        return Memory(self._get(handle, "memory"))

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:  # noqa: N802
        return int(self._get(handle, "power_mw"))

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True


def test_nvml_reads_each_gpu_of_the_job_in_its_order() -> None:
    nvml = FakeNvml()
    reader = NvmlReader(nvml, ["1", "0", "MIG-abc"])
    assert reader.read() == [
        GpuSample(0, 3.0, float(1 << 30), 80.5),
        GpuSample(1, 97.0, float(40 << 30), 612.0),
        GpuSample(2, None, float(5 << 30), None),  # a MIG instance: memory only
    ]
    assert nvml.calls == 9
    reader.close()
    assert nvml.shut


def test_nvml_refuses_a_gpu_it_does_not_know() -> None:
    with pytest.raises(NVMLError):
        NvmlReader(FakeNvml(), ["7"])


SMI = """\
0, GPU-aaa, 100, 80000, 699.12
1, GPU-bbb, [N/A], 12, [Not Supported]
garbage line
2, GPU-ccc, 0, 0
"""


def test_nvidia_smi_csv_by_index_or_uuid() -> None:
    samples = parse_smi_csv(SMI, ["GPU-bbb", "0", "MIG-xyz", "2"])
    assert samples == [
        GpuSample(0, None, 12.0 * 1024 * 1024, None),
        GpuSample(1, 100.0, 80000.0 * 1024 * 1024, 699.12),
        GpuSample(2, None, None, None),  # not listed by --query-gpu (a MIG instance)
        GpuSample(3, None, None, None),  # a row with a field missing is not read
    ]


def test_an_nvidia_smi_that_fails_gives_unknown_readings(tmp_path: Path) -> None:
    broken = tmp_path / "nvidia-smi"
    broken.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    broken.chmod(0o755)
    reader = SmiReader(str(broken), ["0", "1"])
    assert reader.read() == [GpuSample(0, None, None, None), GpuSample(1, None, None, None)]


def test_no_gpu_no_reader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert open_gpu_reader([]) is None
    # A host without the NVIDIA driver: NVML cannot load, no nvidia-smi on the PATH.
    monkeypatch.setattr(gpu_sampler, "_load_nvml", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert open_gpu_reader(["0"]) is None
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    found = open_gpu_reader(["0"])
    assert isinstance(found, SmiReader) and found.name == "nvidia-smi"


@pytest.mark.skipif(Path("/dev/nvidiactl").exists(), reason="the NVIDIA driver is here")
def test_nvml_is_not_loaded_where_the_driver_is_missing() -> None:
    assert gpu_sampler._load_nvml() is None


def test_the_gpus_a_job_holds() -> None:
    def plan(cuda: bool, visible: str | None) -> LaunchPlan:
        env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
        return LaunchPlan([], env, Path("."), cuda_available=cuda)

    assert job_gpus(plan(True, "0,GPU-aaa")) == ["0", "GPU-aaa"]
    assert job_gpus(plan(False, "0,1")) == []  # GPU ids on a worker without CUDA: CPU ranks
    assert job_gpus(plan(True, "")) == [] and job_gpus(plan(True, None)) == []


def test_readings_become_system_metric_points() -> None:
    samples = [GpuSample(0, 55.0, 1e9, None), GpuSample(1, None, None, None)]
    points = system_points(samples, 1700000000.0, node=None)
    assert [(p.name, p.value, p.step, p.ts) for p in points] == [
        ("system/gpu0/utilization_percent", 55.0, None, 1700000000.0),
        ("system/gpu0/memory_used_bytes", 1e9, None, 1700000000.0),
    ]
    assert all(is_system_metric(p.name) for p in points)
    named = system_points(samples[:1], 1.0, node=2)[0].name
    assert (
        named
        == gpu_metric_name(0, "utilization_percent", 2)
        == ("system/node2/gpu0/utilization_percent")
    )
