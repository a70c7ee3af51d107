r"""Job states, the transitions between them, and why a job ended.

    queued -> starting -> running -> succeeded | failed | cancelled
                                  \-> cancelling -> cancelled
    starting | running -> queued   (a retry: attempt + 1)
    cancelling -> queued           (a preempted attempt, stopped through `cancelling`, queued
                                    again; the store requeues a cancelling job for no other reason)

`succeeded`, `failed` and `cancelled` are terminal: nothing moves a job out of them.
`ALLOWED_TRANSITIONS` is the one table of moves: the store changes a state only by a
conditional update from `sources_of(target)`, which refuses a move the table does not hold.
"""

from collections.abc import Iterable
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


class ForbiddenTransition(ValueError):
    """The code asked for a move between states that `ALLOWED_TRANSITIONS` does not hold (a
    bug, not a request to refuse: the API's refusals are `service.errors.InvalidTransition`)."""


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# An attempt is under way: a worker holds it, its processes may live.
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
    # A job may finish on its own while its cancel is on the way: the truth wins. A preempted
    # attempt is stopped through `cancelling` and then queued again (`preempted`).
    JobState.CANCELLING: frozenset(
        {JobState.CANCELLED, JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def sources_of(target: JobState, among: Iterable[JobState] | None = None) -> frozenset[JobState]:
    """The states a job may move to `target` from: every one the table allows, or those of
    `among` (a caller's narrower condition), each checked with `JobState.can_become`;
    ForbiddenTransition when `among` names a move the table does not hold."""
    if among is None:
        return frozenset(s for s in JobState if s.can_become(target))
    sources = frozenset(among)
    forbidden = sorted(s.value for s in sources if not s.can_become(target))
    if forbidden:
        raise ForbiddenTransition(f"no move from {', '.join(forbidden)} to {target.value}")
    return sources


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
    # Stopped by its owner's idle-GPU policy: every GPU it held stayed below the policy's
    # utilisation for the policy's time (docs/scheduling.md); not retried.
    IDLE_GPU = "idle_gpu"


# Worker-side failures that retry the job while `max_retries` allow (docs/reliability.md):
# all but a cancel, a timeout (it would only time out again) and a launch error (the spec or
# the worker cannot run it; retrying changes nothing). A preemption uses no retry.
RETRYABLE_EXIT_REASONS = frozenset(
    {
        ExitReason.USER_ERROR,
        ExitReason.OOM,
        ExitReason.HANG,
        ExitReason.WORKER_LOST,
        ExitReason.RENDEZVOUS_TIMEOUT,
        ExitReason.PREEMPTED,
    }
)


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
