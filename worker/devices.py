"""The devices a worker owns and gives to its jobs (docs/deployment.md, "Placement and queues").

A worker owns either GPUs, named by CUDA ids as `CUDA_VISIBLE_DEVICES` takes them (`0`,
`GPU-<uuid>`, `MIG-<uuid>`), or, with none, a number of CPU slots. `launchbay worker --gpus
0,1` gives the GPUs; without it a worker takes the visible CUDA devices, else one CPU slot per
core this process may run on (`--slots N` says another number). GET /v1/workers reports GPUs
by their ids and CPU slots as `cpu:0` ... `cpu:<N-1>` (slots are counted, not pinned to cores).

The worker assigns its devices once, before it takes jobs (`assign_devices`), and each job
gets the first `nproc_per_node` of them as its `CUDA_VISIBLE_DEVICES` (`worker.launch`). CUDA
numbers devices in PCI bus order here (`CUDA_DEVICE_ORDER=PCI_BUS_ID`, for the probe and the
ranks), as `nvidia-smi` does, so `--gpus 0` is nvidia-smi's GPU 0 also on a host with mixed
GPUs.

GPUs are exclusive: a worker refuses to start on a GPU that a live worker already owns
(`find_gpu_conflicts`), compared by the UUIDs the probe reports, so two containers that
each call their GPU `0` but share it are caught whatever their host names. CPU slots are
not exclusive.

A worker that should have GPUs (`--gpus`, the NVIDIA driver's `/dev/nvidiactl`, a container
given GPUs by `NVIDIA_VISIBLE_DEVICES`) but finds CUDA unusable refuses to start
(`check_cuda_usable`), with the probe's error, rather than quietly run its jobs on CPU;
`LAUNCHBAY_ALLOW_CPU_FALLBACK` lets it, and `--slots` asks for a CPU worker on purpose (one
that hides the host's GPUs from itself and its jobs).
"""

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
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
    # The visible devices' UUIDs, in CUDA's order (empty when unknown).
    uuids: tuple[str, ...] = ()
    # Why CUDA is not usable, from the probe's stderr ("" when it is, or nothing was said).
    error: str = ""


# How CUDA numbers the devices for the worker's probe and every rank: as nvidia-smi does.
DEVICE_ORDER_ENV = "CUDA_DEVICE_ORDER"
DEVICE_ORDER = "PCI_BUS_ID"
# The NVIDIA driver's control device: present where the driver is loaded (and in a container
# given GPUs by the NVIDIA Container Toolkit).
NVIDIA_CONTROL_DEVICE = Path("/dev/nvidiactl")
# NVIDIA_VISIBLE_DEVICES values that give a container no GPU.
NO_NVIDIA_DEVICES = frozenset({"", "void", "none"})
ALLOW_CPU_FALLBACK_ENV = "LAUNCHBAY_ALLOW_CPU_FALLBACK"
STDERR_CHARS = 2000

_CUDA_PROBE = """\
import json, sys, torch
if torch.version.cuda is None:
    print(f"torch {torch.__version__} is a build without CUDA", file=sys.stderr)
available = torch.cuda.is_available()
count = torch.cuda.device_count() if available else 0
uuids = []
for index in range(count):
    try:
        uuids.append(str(torch.cuda.get_device_properties(index).uuid))
    except Exception:
        uuids = []
        break
print(json.dumps([available, count, uuids]))
"""


def probe_cuda(
    python: str = sys.executable,
    code: str = _CUDA_PROBE,
    environ: Mapping[str, str] | None = None,
    timeout_s: float = 300,
) -> CudaInfo:
    """Ask a short-lived interpreter what CUDA devices it sees (in PCI bus order), and their
    UUIDs. What it says on stderr (torch's "CUDA initialization: ..." warning, a driver or
    library error) is logged, and kept as the answer's `error` when CUDA is not usable.
    `environ` is the environment it runs in (default this process's)."""
    env = {**(os.environ if environ is None else environ), DEVICE_ORDER_ENV: DEVICE_ORDER}
    try:
        answer = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=timeout_s, env=env
        )
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("cannot ask torch about CUDA devices (%s); taking none", exc)
        return CudaInfo(False, 0, error=str(exc))
    stderr = _clip_stderr(answer.stderr)
    try:
        if answer.returncode != 0:
            raise ValueError(f"the probe exited with status {answer.returncode}")
        available, count, uuids = json.loads(answer.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, TypeError) as exc:
        log.warning("cannot ask torch about CUDA devices (%s); taking none: %s", exc, stderr)
        return CudaInfo(False, 0, error=stderr or str(exc))
    info = CudaInfo(bool(available), int(count), tuple(str(u) for u in uuids or ()))
    if not (info.available and info.device_count):
        # Not a warning by itself: most machines without CUDA have no GPU either. A worker
        # that should have GPUs says it again, louder (`check_cuda_usable`).
        if stderr:
            log.info("torch finds no usable CUDA device: %s", stderr)
        return CudaInfo(False, 0, error=stderr)
    if stderr:
        log.info("the CUDA probe said: %s", stderr)
    return info


def _clip_stderr(text: str) -> str:
    text = text.strip()
    return text if len(text) <= STDERR_CHARS else "..." + text[-STDERR_CHARS:]


@lru_cache
def detect_cuda() -> CudaInfo:
    """The CUDA devices this process's environment sees (`CUDA_VISIBLE_DEVICES` included),
    asked once per process of a short-lived interpreter (`probe_cuda`): the worker itself
    never imports torch or touches CUDA, so it stays small and free of CUDA state. No answer
    (torch missing or broken): no CUDA device."""
    return probe_cuda()


def gpu_evidence(
    gpus_given: bool,
    environ: Mapping[str, str] | None = None,
    control_device: Path = NVIDIA_CONTROL_DEVICE,
) -> list[str]:
    """Why this worker should have usable CUDA devices: none, on a machine without GPUs."""
    environ = os.environ if environ is None else environ
    reasons = []
    if gpus_given:
        reasons.append("--gpus was given")
    if control_device.exists():
        reasons.append(f"{control_device} exists (the NVIDIA driver is loaded)")
    visible = environ.get("NVIDIA_VISIBLE_DEVICES")
    if visible is not None and visible.strip().lower() not in NO_NVIDIA_DEVICES:
        reasons.append(f"NVIDIA_VISIBLE_DEVICES={visible} (a container given GPUs)")
    return reasons


def check_cuda_usable(
    cuda: CudaInfo,
    *,
    gpus_given: bool,
    slots_given: bool,
    allow_cpu_fallback: bool,
    environ: Mapping[str, str] | None = None,
    control_device: Path = NVIDIA_CONTROL_DEVICE,
) -> None:
    """Refuse to start a worker that should have GPUs but finds CUDA unusable (a wrong
    driver, container toolkit or device reservation): it would run every `device: auto` job
    on CPU with gloo, and "succeed". `--slots` (a CPU worker on purpose) and
    LAUNCHBAY_ALLOW_CPU_FALLBACK let it start; the latter with a warning."""
    if (cuda.available and cuda.device_count) or slots_given:
        return
    reasons = gpu_evidence(gpus_given, environ, control_device)
    if not reasons:
        return
    why = cuda.error or "torch.cuda.is_available() is False"
    if allow_cpu_fallback:
        log.warning(
            "CUDA is not usable (%s) although %s; running jobs on CPU, as %s allows",
            why,
            "; ".join(reasons),
            ALLOW_CPU_FALLBACK_ENV,
        )
        return
    raise DevicesTaken(
        f"CUDA is not usable, but this worker should have GPUs: {'; '.join(reasons)}. "
        f"The CUDA probe said: {why}. Check the NVIDIA driver (nvidia-smi), the NVIDIA "
        "Container Toolkit and the container's GPU reservation (docs/deployment.md, "
        f'"First hour on a GPU host"), or set {ALLOW_CPU_FALLBACK_ENV}=true to run '
        "this worker's jobs on CPU"
    )


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
    """The CUDA ids of `--gpus`: a comma-separated list, none empty, none twice, at most one
    MIG instance (CUDA shows a process one MIG instance, whatever it is given)."""
    ids = tuple(item.strip() for item in text.split(","))
    if not any(ids):
        raise ValueError("give at least one CUDA device id, e.g. --gpus 0,1")
    if not all(ids):
        raise ValueError(f"{text!r} has an empty device id")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"{text!r} names device {', '.join(repeated)} more than once")
    if sum(i.upper().startswith("MIG-") for i in ids) > 1:
        raise ValueError(
            f"{text!r}: CUDA exposes one MIG instance per process, so a worker owns at most "
            "one; run one worker per MIG instance (e.g. --gpus MIG-<uuid>)"
        )
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
    about (`detect_cuda`), so that the worker and every job it runs see only them; CUDA
    numbers them in PCI bus order (`CUDA_DEVICE_ORDER`), as nvidia-smi does. Given CPU slots
    hide every GPU the same way (`CUDA_VISIBLE_DEVICES` empty): a CPU worker on a GPU host
    must not run its jobs on GPUs that other workers own.
    """
    os.environ[DEVICE_ORDER_ENV] = DEVICE_ORDER
    if gpus and cpu_slots is not None:
        raise DevicesTaken("give either GPUs (--gpus) or CPU slots (--slots), not both")
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        return WorkerDevices(gpus=tuple(gpus))
    if cpu_slots is not None:
        if cpu_slots < 1:
            raise DevicesTaken(f"--slots {cpu_slots}: a worker needs at least one CPU slot")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
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
    devices: WorkerDevices,
    host: str,
    records: Iterable[Mapping[str, Any]],
    own_name: str,
    uuids: Sequence[str] = (),
) -> dict[str, list[str]]:
    """The other live workers (from their records, `service.worker_records`) that own some of our
    GPUs: {worker name: our ids of the GPUs both own}. Where both sides know their GPUs'
    UUIDs (`uuids`, in the order of `devices.gpus`; a record's `gpu_uuids`) those are
    compared, on any host; else the ids as written, on the same host."""
    by_uuid = (
        dict(zip(uuids, devices.gpus, strict=False)) if len(uuids) == len(devices.gpus) else {}
    )
    mine = set(devices.gpus)
    conflicts: dict[str, list[str]] = {}
    for record in records:
        if record.get("name") == own_name:
            continue
        their_uuids = {str(u) for u in record.get("gpu_uuids") or ()}
        if by_uuid and their_uuids:
            shared = sorted(by_uuid[u] for u in by_uuid.keys() & their_uuids)
        elif record.get("host") == host:
            theirs = {str(d) for d in record.get("devices") or () if not is_cpu_slot(str(d))}
            shared = sorted(mine & theirs)
        else:
            continue
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
    """Make `devices` this worker's, for the jobs it runs from now on."""
    global _assigned
    _assigned = devices


def worker_devices(cuda: CudaInfo) -> WorkerDevices:
    """The devices of this worker: those assigned, else (a job run outside `launchbay
    worker`, as in tests) the defaults for what `cuda` says."""
    return _assigned if _assigned is not None else default_devices(cuda)


def reserved_devices(own: WorkerDevices, ids: Sequence[str]) -> WorkerDevices:
    """The devices the dispatcher reserved for one attempt, out of this worker's own."""
    if own.gpus:
        return WorkerDevices(gpus=tuple(ids))
    return WorkerDevices(cpu_slots=len(ids))


def slot_cores(ids: Sequence[str]) -> list[int]:
    """The cores the CPU slots `cpu:<n>` run on: slot n on this process's n-th usable core,
    round the cores again when there are more slots than cores."""
    usable = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    slots = [int(i[len(CPU_SLOT_PREFIX) :]) for i in ids if i.startswith(CPU_SLOT_PREFIX)]
    return sorted({usable[slot % len(usable)] for slot in slots})
