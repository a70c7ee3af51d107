"""The GPUs of one running attempt, watched from a thread of its own: every
`LAUNCHBAY_GPU_SAMPLE_INTERVAL_S` it reads each GPU the job holds (`worker.gpu_sampler`),
stores the readings as the job's system metrics (`jobs.contract.system_metrics`: metric points
under `system/`, apart from the program's own), and judges them by its owner's idle-GPU policy
(`worker.idle_gpu`): a `warn` verdict adds a warning to the job and an `idle_gpu` event, a
`stop` one is kept in `stop_message` for the supervisor loop, which stops the attempt.

A thread, as the heartbeat is: nvidia-smi, where NVML is missing, takes a tenth of a second or
more, which the supervisor loop's polls must not wait for. A job that holds no GPU, or a host
where neither NVML nor nvidia-smi answers, has no watch (`gpu_watch_for`).
"""

import logging
import threading
import time
from collections.abc import Sequence

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from jobs.contract.system_metrics import (
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_UTILIZATION,
    gpu_metric_name,
)
from jobs.states import AttemptRef
from service.db import session_scope
from service.records import (
    AttemptSuperseded,
    NewMetricPoint,
    add_attempt_event,
    add_job_warnings,
    append_metric_points,
)
from service.scheduling.idle_gpu import IdleGpuPolicy, idle_gpu_policy_of
from worker.cpu_policy import run_in_batches
from worker.gpu_sampler import GpuReader, GpuSample, open_gpu_reader
from worker.idle_gpu import IdleGpuJudge, IdleVerdict
from worker.launch import LaunchPlan

log = logging.getLogger(__name__)

IDLE_GPU_EVENT = "idle_gpu"


def job_gpus(plan: LaunchPlan) -> list[str]:
    """The CUDA ids of the GPUs the attempt holds: those its ranks are given, on a worker whose
    CUDA works (a worker given GPU ids without CUDA runs its jobs on CPU: none)."""
    if not plan.cuda_available:
        return []
    return [d.strip() for d in plan.env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]


def system_points(
    samples: Sequence[GpuSample], ts: float, node: int | None
) -> list[NewMetricPoint]:
    """The readings as metric points (a quantity a GPU did not report is left out)."""
    points = []
    for sample in samples:
        for quantity, value in (
            (GPU_UTILIZATION, sample.utilization_percent),
            (GPU_MEMORY_USED, sample.memory_used_bytes),
            (GPU_POWER, sample.power_watts),
        ):
            if value is not None:
                name = gpu_metric_name(sample.index, quantity, node)
                points.append(NewMetricPoint(step=None, epoch=None, name=name, value=value, ts=ts))
    return points


class GpuWatch:
    def __init__(
        self,
        engine: Engine,
        ref: AttemptRef,
        reader: GpuReader,
        *,
        interval_s: float,
        policy: IdleGpuPolicy | None,
    ) -> None:
        self.engine, self.ref, self.reader = engine, ref, reader
        self.interval_s = interval_s
        self.judge = None if policy is None else IdleGpuJudge(policy)
        # Set by a `stop` verdict: the message of the attempt's outcome.
        self.stop_message: str | None = None
        self.samples = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"gpu-watch-{ref.job_id}-{ref.attempt}", daemon=True
        )

    @property
    def native_id(self) -> int | None:
        """The thread's id for the kernel once started (its CPU time, in the benchmark)."""
        return self._thread.native_id

    def start(self) -> "GpuWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=SAMPLE_JOIN_S)
        self.reader.close()

    def _run(self) -> None:
        run_in_batches()
        while not self._halt.wait(self.interval_s):
            try:
                if not self.sample():
                    return
            except Exception:  # a reader's surprise must not end the watch (nor the job)
                log.exception("%s: sampling its GPUs failed", self.ref)

    def sample(self) -> bool:
        """Read, store and judge one sample (also called directly by tests and the bench);
        False once the job is no longer this attempt's."""
        samples = self.reader.read()
        self.samples += 1
        points = system_points(samples, time.time(), self.ref.node)
        try:
            if points:
                with session_scope(self.engine) as session:
                    append_metric_points(session, self.ref.job_id, self.ref.attempt, points)
        except AttemptSuperseded:
            return False
        except SQLAlchemyError as exc:
            log.warning("%s: storing the GPUs' readings failed: %s", self.ref, exc)
        if self.judge is not None and self.stop_message is None:  # a stop is said once
            verdict = self.judge.observe(time.monotonic(), samples)
            if verdict is not None:
                self._act(verdict)
        return True

    def _act(self, verdict: IdleVerdict) -> None:
        log.warning("%s: %s", self.ref, verdict.message)
        data: dict[str, object] = {
            "action": verdict.action,
            "idle_s": round(verdict.idle_s, 1),
            "message": verdict.message,
        }
        try:
            with session_scope(self.engine) as session:
                if verdict.action == "warn":
                    add_job_warnings(session, self.ref.job_id, self.ref.attempt, [verdict.message])
                add_attempt_event(session, self.ref.job_id, IDLE_GPU_EVENT, self.ref.attempt, data)
        except (AttemptSuperseded, SQLAlchemyError) as exc:
            log.warning("%s: the idle-GPU verdict was not recorded: %s", self.ref, exc)
        if verdict.action == "stop":
            self.stop_message = verdict.message


# A sample in flight (nvidia-smi answering slowly) is waited for this long at the end.
SAMPLE_JOIN_S = 15.0


def gpu_watch_for(
    engine: Engine, ref: AttemptRef, plan: LaunchPlan, owner: str | None, interval_s: float
) -> GpuWatch | None:
    """The watch of an attempt's GPUs, with its owner's idle-GPU policy, started; None when it
    holds no GPU or none of them can be read here."""
    gpus = job_gpus(plan)
    reader = open_gpu_reader(gpus) if gpus else None
    if reader is None:
        return None
    policy = None
    try:
        with engine.connect() as connection:
            policy = idle_gpu_policy_of(connection, owner or "")
    except SQLAlchemyError as exc:
        log.warning("%s: the idle-GPU policy could not be read (none applies): %s", ref, exc)
    log.info("%s: sampling GPUs %s through %s", ref, ",".join(gpus), reader.name)
    return GpuWatch(engine, ref, reader, interval_s=interval_s, policy=policy).start()
