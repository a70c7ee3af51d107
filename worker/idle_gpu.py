"""Whether a job's GPUs are idle, by its owner's idle-GPU policy
(`service.scheduling.idle_gpu`): pure, fed one sample of all the job's GPUs at a time.

Idle means every GPU the job holds reported a utilisation below `below_percent`; the time
idle starts at the first such sample and ends at any other (a GPU busy, or one whose
utilisation is unknown: a MIG instance reports none, and is never judged idle). A job holding
no GPU is never idle. Once idle for `for_s`, the judge says its action: `warn` once per
attempt, `stop` when it comes.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from service.scheduling.idle_gpu import IdleGpuPolicy
from worker.gpu_sampler import GpuSample


@dataclass(frozen=True)
class IdleVerdict:
    action: Literal["warn", "stop"]
    idle_s: float
    message: str


class IdleGpuJudge:
    def __init__(self, policy: IdleGpuPolicy) -> None:
        self.policy = policy
        self.idle_since: float | None = None
        self.warned = False

    def observe(self, now: float, samples: Sequence[GpuSample]) -> IdleVerdict | None:
        """The verdict after the sample taken at `now` (monotonic seconds), or None."""
        if not samples or not all(self._idle(s) for s in samples):
            self.idle_since = None
            return None
        if self.idle_since is None or now < self.idle_since:
            self.idle_since = now
        idle_s = now - self.idle_since
        if idle_s < self.policy.for_s:
            return None
        action = self.policy.action
        if action == "warn":
            if self.warned:
                return None
            self.warned = True
        return IdleVerdict(action, idle_s, self._message(len(samples), idle_s))

    def _idle(self, sample: GpuSample) -> bool:
        used = sample.utilization_percent
        return used is not None and used < self.policy.below_percent

    def _message(self, gpus: int, idle_s: float) -> str:
        policy = self.policy
        what = "stopped" if policy.action == "stop" else "idle"
        return (
            f"{what} by the idle-GPU policy: its {gpus} GPU(s) stayed below "
            f"{policy.below_percent:g}% utilisation for {idle_s:.0f} s "
            f"(for_s={policy.for_s:g})"
        )
