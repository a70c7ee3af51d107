r"""Job states, the transitions between them, and why a job ended.

    queued -> starting -> running -> succeeded | failed | cancelled
                                  \-> cancelling -> cancelled
    starting | running | cancelling -> queued   (a retry: attempt + 1)

`succeeded`, `failed` and `cancelled` are terminal: nothing moves a job out of them.
"""

from dataclasses import dataclass
from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    RUNNING = "running"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES

    def can_become(self, target: "JobState") -> bool:
        return target in ALLOWED_TRANSITIONS[self]


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
ACTIVE_STATES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.CANCELLING})

ALLOWED_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.STARTING, JobState.CANCELLED, JobState.FAILED}),
    JobState.STARTING: frozenset(
        {
            JobState.RUNNING,
            JobState.FAILED,
            JobState.CANCELLING,
            JobState.CANCELLED,
            JobState.QUEUED,
            JobState.SUCCEEDED,
        }
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLING, JobState.QUEUED}
    ),
    # A job may finish on its own while its cancel is on the way: the truth wins.
    JobState.CANCELLING: frozenset({JobState.CANCELLED, JobState.SUCCEEDED, JobState.FAILED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def states_that_can_become(target: JobState) -> frozenset[JobState]:
    """Every state from which `target` is reachable in one step."""
    return frozenset(s for s, allowed in ALLOWED_TRANSITIONS.items() if target in allowed)


class NodeState(StrEnum):
    """A node of a multi-node job's attempt: the job's states, plus `stopped` (its processes
    were stopped because the attempt ended elsewhere: another node, the reaper, the API)."""

    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"


class ExitReason(StrEnum):
    COMPLETED = "completed"
    USER_ERROR = "user_error"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    HANG = "hang"
    WORKER_LOST = "worker_lost"
    OOM = "oom"
    LAUNCH_ERROR = "launch_error"
    RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
    # The job's own Python environment (its `environment`) could not be built.
    ENVIRONMENT_ERROR = "environment_error"
    # Stopped to make room for another job (the dispatcher's preemption for a job of higher
    # priority, or Slurm's); queued again without using a retry (docs/scheduling.md).
    PREEMPTED = "preempted"


@dataclass(frozen=True)
class AttemptRef:
    """One attempt of a job (its node `node`, for a multi-node job): what names the work a
    worker task does, in the worker, the store's writes for it, and the logs."""

    job_id: str
    attempt: int
    node: int | None = None

    def __str__(self) -> str:
        node = "" if self.node is None else f" node {self.node}"
        return f"job {self.job_id} attempt {self.attempt}{node}"
