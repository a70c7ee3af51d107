"""Why the supervisor stops an attempt before its launcher exits, and the outcome each stop
gives the job (`worker.monitor` decides when; this says what it means)."""

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from jobs.spec import JobSpec
from jobs.states import ExitReason, JobState
from worker.outcome import Outcome


class StopReason(StrEnum):
    CANCEL = "cancel"
    TIMEOUT = "timeout"
    HANG = "hang"
    SHUTDOWN = "shutdown"
    RENDEZVOUS = "rendezvous"  # a multi-node job's nodes did not all join in time
    DISK = "disk"  # the job's files went over what its owner's disk quota leaves it
    LOST = "lost"  # the job is no longer this attempt's (retried, ended or deleted elsewhere)
    IDLE_GPU = "idle_gpu"  # its GPUs stayed idle as its owner's idle-GPU policy says to stop


# Stops that fail the attempt: a node of a multi-node job announces them before it stops its
# processes (see `AttemptMonitor.announce`).
FAILING_STOPS = frozenset(
    {
        StopReason.TIMEOUT,
        StopReason.HANG,
        StopReason.SHUTDOWN,
        StopReason.RENDEZVOUS,
        StopReason.DISK,
        StopReason.IDLE_GPU,
    }
)


@dataclass(frozen=True)
class StopOutcomes:
    """The outcome each stop gives one attempt (`outcome`)."""

    spec: JobSpec
    worker_name: str
    # A node of a multi-node job: how long its nodes had to join.
    rendezvous_timeout_s: float | None

    def outcome(
        self,
        stop: StopReason,
        returncode: int | None,
        *,
        over_disk: str | None,
        preempted_by: Callable[[], str | None],
        idle_gpu: str | None = None,
    ) -> Outcome | None:
        """The outcome of the attempt stopped for `stop` (None: the job is no longer ours to
        end). `over_disk` says how a DISK stop went over, `idle_gpu` how idle an IDLE_GPU
        stop found the GPUs; `preempted_by` is asked only for a cancel: the dispatcher's
        message when the cancel was a preemption, else None."""
        spec = self.spec
        if stop is StopReason.LOST:
            return None
        if stop is StopReason.CANCEL:
            preempted = preempted_by()
            if preempted is not None:
                return Outcome(JobState.FAILED, ExitReason.PREEMPTED, returncode, preempted)
            cancelled = "cancelled on request"
            return Outcome(JobState.CANCELLED, ExitReason.CANCELLED, returncode, cancelled)
        if stop is StopReason.TIMEOUT:
            message = f"stopped after timeout_s={spec.timeout_s:g} s"
            return Outcome(JobState.FAILED, ExitReason.TIMEOUT, returncode, message)
        if stop is StopReason.HANG:
            hang_s = spec.hang_timeout_s
            message = f"stopped: no new event from rank 0 for hang_timeout_s={hang_s:g} s"
            return Outcome(JobState.FAILED, ExitReason.HANG, returncode, message)
        if stop is StopReason.RENDEZVOUS:
            message = (
                f"not all {spec.nnodes} nodes joined within "
                f"rendezvous_timeout_s={self.rendezvous_timeout_s:g} s; every node was stopped"
            )
            return Outcome(JobState.FAILED, ExitReason.RENDEZVOUS_TIMEOUT, returncode, message)
        if stop is StopReason.DISK:
            return Outcome(JobState.FAILED, ExitReason.USER_ERROR, returncode, over_disk)
        if stop is StopReason.IDLE_GPU:
            return Outcome(JobState.FAILED, ExitReason.IDLE_GPU, returncode, idle_gpu)
        message = (
            f"worker {self.worker_name} shut down while the job ran; its processes were stopped"
        )
        return Outcome(JobState.FAILED, ExitReason.WORKER_LOST, returncode, message)
