"""P14: what sampling a job's GPUs costs the worker (`python -m bench gpusampler`).

The GPU watch of a running attempt (`worker.gpu_watch`: its thread, the NVML reader, the
store's write of the readings into a real SQLite database) with 8 GPUs, each NVML call of the
stand-in busy for `NVML_CALL_S` of CPU, as a real one is in the driver (an ioctl). Measured:
the watch thread's CPU seconds (from the kernel, by its thread id) ÷ the wall seconds it ran,
÷ the GPUs, at the default interval (10 s) for a minute: the goal is ≤ 0.1 % of a core per
GPU. Then the same loop at 0.5 s for 20 s: the CPU of one sample (read, store, judge).

Where NVML cannot be loaded the watch runs `nvidia-smi` once a sample instead: a process start
each time, not measured here (this machine has no nvidia-smi; docs/benchmarks.md says more).
"""

import tempfile
import time
from pathlib import Path

import psutil
from sqlalchemy.engine import Engine

from bench.common import Result
from jobs.spec import JobSpec
from jobs.states import AttemptRef, JobState
from service import records
from service.db import make_engine, session_scope, upgrade_database
from service.scheduling.idle_gpu import IdleGpuPolicy
from worker.gpu_sampler import NvmlReader
from worker.gpu_watch import GpuWatch

GPUS = 8
# CPU an NVML query takes (an ioctl into the driver; tens of microseconds on a loaded host).
NVML_CALL_S = 50e-6
DEFAULT_INTERVAL_S = 10.0
DEFAULT_WALL_S = 60.0
DENSE_INTERVAL_S = 0.5
DENSE_WALL_S = 20.0
GOAL = 0.001  # of a core, per GPU


class NVMLError(Exception):
    pass


class CostlyNvml:
    """`pynvml`'s calls the reader makes, each spinning for NVML_CALL_S of CPU."""

    NVMLError = NVMLError

    def __init__(self, call_s: float) -> None:
        self.call_s = call_s
        self.calls = 0

    def _spend(self) -> None:
        self.calls += 1
        end = time.thread_time() + self.call_s
        while time.thread_time() < end:
            pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802 - pynvml's names
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        return uuid

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:  # noqa: N802
        self._spend()
        return type("Utilization", (), {"gpu": 97})()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:  # noqa: N802
        self._spend()
        return type("Memory", (), {"used": 40 << 30})()

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802
        self._spend()
        return 600_000

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass


def running_job(url: str) -> tuple[AttemptRef, Engine]:
    upgrade_database(url)
    engine = make_engine(url)
    with session_scope(engine) as session:
        job_id = records.create_job(session, JobSpec(name="p14", recipe="synthetic")).id
    with session_scope(engine) as session:
        records.take_job(session, job_id, 1)
    with session_scope(engine) as session:
        records.transition_job(session, job_id, JobState.RUNNING, attempt=1)
    return AttemptRef(job_id, 1), engine


def thread_cpu_s(native_id: int | None) -> float:
    for thread in psutil.Process().threads():
        if thread.id == native_id:
            return float(thread.user_time + thread.system_time)
    raise RuntimeError(f"thread {native_id} not found")


def watch_for(interval_s: float, wall_s: float, url: str) -> tuple[float, float, int, int]:
    """(thread CPU s, wall s, samples, NVML calls) of a watch run for `wall_s`."""
    ref, engine = running_job(url)
    nvml = CostlyNvml(NVML_CALL_S)
    reader = NvmlReader(nvml, [str(i) for i in range(GPUS)])
    policy = IdleGpuPolicy(below_percent=5, for_s=1800, action="warn")
    watch = GpuWatch(engine, ref, reader, interval_s=interval_s, policy=policy)
    began = time.monotonic()
    watch.start()
    time.sleep(wall_s)
    cpu = thread_cpu_s(watch.native_id)  # before stopping: the thread is still there
    wall = time.monotonic() - began
    watch.stop()
    engine.dispose()
    return cpu, wall, watch.samples, nvml.calls


def run(long: bool = False) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="launchbay-bench-p14-") as root:
        default = watch_for(DEFAULT_INTERVAL_S, DEFAULT_WALL_S, f"sqlite:///{Path(root)}/a.db")
        dense = watch_for(DENSE_INTERVAL_S, DENSE_WALL_S, f"sqlite:///{Path(root)}/b.db")
    cpu, wall, samples, calls = default
    per_gpu = cpu / wall / GPUS
    dense_cpu, _, dense_samples, _ = dense
    per_sample_ms = dense_cpu / max(1, dense_samples) * 1000
    implied = per_sample_ms / 1000 / DEFAULT_INTERVAL_S / GPUS
    return [
        Result(
            "P14",
            f"GPU sampling: the watch thread's CPU s ÷ wall s ÷ {GPUS} GPUs, at the default "
            f"{DEFAULT_INTERVAL_S:g} s, NVML stand-in at {NVML_CALL_S * 1e6:.0f} µs of CPU a call",
            f"{per_gpu * 100:.4f} % of a core per GPU ({cpu:.3f} CPU s in {wall:.1f} s, "
            f"{samples} samples, {calls} NVML calls)",
            f"≤ {GOAL * 100:g} %",
            per_gpu <= GOAL,
            "the readings stored as system metrics in SQLite and judged by an idle-GPU policy",
        ),
        Result(
            "P14′",
            f"the same loop every {DENSE_INTERVAL_S:g} s: CPU of one sample (read {GPUS} GPUs, "
            "store, judge)",
            f"{per_sample_ms:.2f} ms ({dense_samples} samples); at {DEFAULT_INTERVAL_S:g} s "
            f"that is {implied * 100:.4f} % of a core per GPU",
            "report",
            None,
            "the store's transaction is most of it; NVML's 24 calls are 1.2 ms",
        ),
    ]
