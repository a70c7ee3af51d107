"""The devices a worker owns and gives to its jobs (docs/deployment.md, "Placement and queues").

A worker owns either GPUs, named by CUDA ids as `CUDA_VISIBLE_DEVICES` takes them (`0`,
`GPU-<uuid>`, `MIG-<uuid>`), or, with none, a number of CPU slots. `launchbay worker --gpus
0,1` gives the GPUs; without it a worker takes the visible CUDA devices, else one CPU slot per
core this process may run on (`--slots N` says another number). GET /v1/workers reports GPUs
by their ids and CPU slots as `cpu:0` ... `cpu:<N-1>` (slots are counted, not pinned to cores).

The worker assigns its devices once, before it takes jobs (`assign_devices`): the work horses
RQ forks inherit them, and their jobs inherit `CUDA_VISIBLE_DEVICES` from the worker's
environment. GPUs are exclusive on a host: a worker refuses to start on a GPU that a live
worker of the same host already owns (`find_gpu_conflicts`). CPU slots are not.
"""

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

CPU_SLOT_PREFIX = "cpu:"
# What workers before CPU slots were numbered reported for a CPU worker.
LEGACY_CPU_ID = "cpu"


class DevicesTaken(Exception):
    """A worker cannot start with the devices it was given; the message says why."""


@dataclass(frozen=True)
class CudaInfo:
    available: bool
    device_count: int


_CUDA_PROBE = (
    "import json, torch; available = torch.cuda.is_available(); "
    "print(json.dumps([available, torch.cuda.device_count() if available else 0]))"
)


@lru_cache
def detect_cuda() -> CudaInfo:
    """The CUDA devices this process's environment sees (`CUDA_VISIBLE_DEVICES` included),
    asked once per process of a short-lived interpreter: the worker itself never imports
    torch or touches CUDA, so the work horses it forks are small, quick to fork and free of
    CUDA state. No answer (torch missing or broken): no CUDA device."""
    try:
        answer = subprocess.run(
            [sys.executable, "-c", _CUDA_PROBE],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        available, count = json.loads(answer.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.warning("cannot ask torch about CUDA devices (%s); taking none", exc)
        return CudaInfo(False, 0)
    return CudaInfo(bool(available), int(count))


@dataclass(frozen=True)
class WorkerDevices:
    """GPUs by CUDA id when `gpus` is not empty, else `cpu_slots` CPU slots."""

    gpus: tuple[str, ...] = ()
    cpu_slots: int = 1

    @property
    def count(self) -> int:
        """How many ranks the worker can place: one per GPU, or per CPU slot."""
        return len(self.gpus) if self.gpus else self.cpu_slots

    def ids(self) -> list[str]:
        """The devices as GET /v1/workers reports them."""
        if self.gpus:
            return list(self.gpus)
        return [f"{CPU_SLOT_PREFIX}{slot}" for slot in range(self.cpu_slots)]

    def describe(self) -> str:
        """For messages: `2 device(s) (0,1)` or `4 CPU slot(s)`."""
        if self.gpus:
            return f"{len(self.gpus)} device(s) ({','.join(self.gpus)})"
        return f"{self.cpu_slots} CPU slot(s)"


def parse_gpu_ids(text: str) -> tuple[str, ...]:
    """The CUDA ids of `--gpus`: a comma-separated list, none empty, none twice."""
    ids = tuple(item.strip() for item in text.split(","))
    if not any(ids):
        raise ValueError("give at least one CUDA device id, e.g. --gpus 0,1")
    if not all(ids):
        raise ValueError(f"{text!r} has an empty device id")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"{text!r} names device {', '.join(repeated)} more than once")
    return ids


def cpu_slot_count() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def visible_cuda_ids(cuda: CudaInfo) -> tuple[str, ...]:
    """The ids of the CUDA devices this process sees, as `CUDA_VISIBLE_DEVICES` names them."""
    if not cuda.available or cuda.device_count == 0:
        return ()
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [d for d in visible if d]
    return tuple(visible[: cuda.device_count] or [str(i) for i in range(cuda.device_count)])


def default_devices(cuda: CudaInfo) -> WorkerDevices:
    """What a worker owns unless told: the visible CUDA devices, else a slot per core."""
    gpus = visible_cuda_ids(cuda)
    return WorkerDevices(gpus=gpus) if gpus else WorkerDevices(cpu_slots=cpu_slot_count())


def choose_devices(gpus: Sequence[str] | None, cpu_slots: int | None) -> WorkerDevices:
    """The devices of `launchbay worker --gpus ... | --slots N`, or the defaults.

    Given GPUs become this process's `CUDA_VISIBLE_DEVICES` at once, before CUDA is asked
    about (`detect_cuda`), so that the worker and every job it runs see only them.
    """
    if gpus and cpu_slots is not None:
        raise DevicesTaken("give either GPUs (--gpus) or CPU slots (--slots), not both")
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        return WorkerDevices(gpus=tuple(gpus))
    if cpu_slots is not None:
        if cpu_slots < 1:
            raise DevicesTaken(f"--slots {cpu_slots}: a worker needs at least one CPU slot")
        return WorkerDevices(cpu_slots=cpu_slots)
    return default_devices(detect_cuda())


def check_gpus_seen(devices: WorkerDevices, cuda: CudaInfo) -> None:
    """Refuse GPUs that CUDA does not see (with CUDA present at all: without it, as on a
    development machine, the jobs run on CPU and the ids only size and place them)."""
    if devices.gpus and cuda.available and cuda.device_count < len(devices.gpus):
        raise DevicesTaken(
            f"--gpus {','.join(devices.gpus)}: CUDA sees only {cuda.device_count} of them"
        )


def is_cpu_slot(device_id: str) -> bool:
    return device_id == LEGACY_CPU_ID or device_id.startswith(CPU_SLOT_PREFIX)


def find_gpu_conflicts(
    devices: WorkerDevices, host: str, records: Iterable[Mapping[str, Any]], own_name: str
) -> dict[str, list[str]]:
    """The other live workers of `host` (from their records, `service.queue`) that own some
    of our GPUs: {worker name: the GPU ids both own}."""
    mine = set(devices.gpus)
    conflicts: dict[str, list[str]] = {}
    for record in records:
        if record.get("host") != host or record.get("name") == own_name:
            continue
        theirs = {str(d) for d in record.get("devices") or () if not is_cpu_slot(str(d))}
        shared = sorted(mine & theirs)
        if shared:
            conflicts[str(record.get("name"))] = shared
    return conflicts


def describe_conflicts(host: str, conflicts: Mapping[str, list[str]]) -> str:
    taken = "; ".join(f"{','.join(ids)} by worker {name}" for name, ids in conflicts.items())
    return (
        f"GPUs already owned on host {host}: {taken}. Give this worker other GPUs (--gpus), "
        "or stop that worker first (the record of a worker that died expires within seconds)"
    )


_assigned: WorkerDevices | None = None


def assign_devices(devices: WorkerDevices) -> None:
    """Make `devices` this worker's, for the work horses it forks from now on."""
    global _assigned
    _assigned = devices


def worker_devices(cuda: CudaInfo) -> WorkerDevices:
    """The devices of this worker: those assigned, else (a job run outside `launchbay
    worker`, as in tests) the defaults for what `cuda` says."""
    return _assigned if _assigned is not None else default_devices(cuda)
