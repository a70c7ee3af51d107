"""Reading the GPUs a job holds: utilisation, memory used and power, one `GpuSample` per GPU.

One interface (`GpuReader`) and two readers behind it, chosen by `open_gpu_reader`:

- `NvmlReader`: NVML through `nvidia-ml-py` (`pynvml`, imported here only when a job holds
  GPUs): a few microseconds a call, no process started;
- `SmiReader`: `nvidia-smi --query-gpu=... --format=csv` where NVML cannot be loaded (the
  package missing, an old driver): one short process per sample.

Neither is there on a machine without the NVIDIA driver: `open_gpu_reader` answers None and
nothing is sampled. A GPU is named by the CUDA id the job was given (`0`, `GPU-<uuid>`,
`MIG-<uuid>`, as `CUDA_VISIBLE_DEVICES` takes them; numbers in PCI bus order, as NVML and
nvidia-smi count). A quantity a GPU does not report (a MIG instance's utilisation, a power
reading the board lacks) is None.
"""

import logging
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

SMI_QUERY = "index,uuid,utilization.gpu,memory.used,power.draw"
SMI_TIMEOUT_S = 10.0
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one moment; `index` is its place among the job's GPUs (the ranks' cuda:i)."""

    index: int
    utilization_percent: float | None
    memory_used_bytes: float | None
    power_watts: float | None


class GpuReader(Protocol):
    """What the sampler reads a job's GPUs through."""

    name: str

    def read(self) -> list[GpuSample]:
        """One sample of each of the job's GPUs, in their order."""
        ...

    def close(self) -> None: ...


class NvmlReader:
    """NVML (`pynvml`): handles found once, three calls per GPU per sample."""

    name = "nvml"

    def __init__(self, nvml: Any, devices: Sequence[str]) -> None:
        """`nvml` is the `pynvml` module (initialised), or a stand-in with its functions."""
        self.nvml = nvml
        self.handles = [self._handle(device) for device in devices]

    def _handle(self, device: str) -> Any:
        if device.isdigit():
            return self.nvml.nvmlDeviceGetHandleByIndex(int(device))
        return self.nvml.nvmlDeviceGetHandleByUUID(device)

    def read(self) -> list[GpuSample]:
        return [
            GpuSample(
                index,
                self._ask(lambda h: float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu), handle),
                self._ask(lambda h: float(self.nvml.nvmlDeviceGetMemoryInfo(h).used), handle),
                self._ask(lambda h: self.nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, handle),
            )
            for index, handle in enumerate(self.handles)
        ]

    def _ask(self, call: Any, handle: Any) -> float | None:
        try:
            return float(call(handle))
        except self.nvml.NVMLError:  # not supported here (a MIG instance), or gone
            return None

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


def _smi_number(text: str) -> float | None:
    """A number of nvidia-smi's csv (`nounits`); None for `[N/A]`, `[Not Supported]`..."""
    try:
        return float(text.strip())
    except ValueError:
        return None


def parse_smi_csv(text: str, devices: Sequence[str]) -> list[GpuSample]:
    """The samples of `devices` in `nvidia-smi --query-gpu=SMI_QUERY
    --format=csv,noheader,nounits` output; a device it does not list (a MIG instance) has
    None for each quantity."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 5:
            rows[fields[0]] = rows[fields[1]] = fields
    samples = []
    for index, device in enumerate(devices):
        row = rows.get(device)
        if row is None:
            samples.append(GpuSample(index, None, None, None))
            continue
        memory_mib = _smi_number(row[3])
        memory = None if memory_mib is None else memory_mib * MIB
        samples.append(GpuSample(index, _smi_number(row[2]), memory, _smi_number(row[4])))
    return samples


class SmiReader:
    """`nvidia-smi`: one process per sample."""

    name = "nvidia-smi"

    def __init__(self, executable: str, devices: Sequence[str]) -> None:
        self.executable, self.devices = executable, list(devices)

    def read(self) -> list[GpuSample]:
        argv = [
            self.executable,
            f"--query-gpu={SMI_QUERY}",
            "--format=csv,noheader,nounits",
        ]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=True
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("nvidia-smi did not answer: %s", exc)
            return [GpuSample(i, None, None, None) for i in range(len(self.devices))]
        return parse_smi_csv(done.stdout, self.devices)

    def close(self) -> None:
        pass


def _load_nvml() -> Any | None:
    """`pynvml`, initialised; None where it or the driver's library is missing."""
    try:
        import pynvml  # nvidia-ml-py: imported only where a job holds GPUs
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("NVML cannot be used (%s); trying nvidia-smi", exc)
        return None
    return pynvml


def open_gpu_reader(devices: Sequence[str]) -> GpuReader | None:
    """A reader of `devices` (CUDA ids): NVML, else nvidia-smi, else None (no GPU here, or
    no devices given: nothing to sample)."""
    if not devices:
        return None
    nvml = _load_nvml()
    if nvml is not None:
        try:
            return NvmlReader(nvml, devices)
        except nvml.NVMLError as exc:
            log.warning("NVML does not know GPUs %s (%s); trying nvidia-smi", devices, exc)
            nvml.nvmlShutdown()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    return SmiReader(smi, devices)
