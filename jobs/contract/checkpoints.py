"""The checkpoint policy of a job spec (`checkpoint:`), and the one rule for which checkpoint
is the best: the worker's retention keeps it; the service marks it `best` in a job's listing and
serves it as `…/checkpoints/best/download` (`CheckpointPolicy.named_best`, which both use);
clients show the mark and compute nothing.

The best is the checkpoint whose `best_metric` value is lowest (`best_mode: min`) or highest
(`max`) among those that report it as a number; on a tie, the latest (highest seq) wins: it
was trained longer for the same score. What `best` names for a job whose spec has no
`best_metric` is its latest checkpoint.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")


class CheckpointPolicy(BaseModel):
    """When the ranks save a checkpoint, and which ones the worker keeps."""

    model_config = ConfigDict(extra="forbid")

    every_steps: Annotated[int, Field(ge=1)] | None = None
    every_epochs: Annotated[int, Field(ge=1)] | None = 1
    keep_last: Annotated[int, Field(ge=1, le=1000)] = 3
    best_metric: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    best_mode: Literal["min", "max"] = "min"

    def is_due(self, step: int, epoch: int, end_of_epoch: bool) -> bool:
        """Whether a checkpoint is due after optimizer step `step` (1-based) of `epoch`."""
        if self.every_steps and step > 0 and step % self.every_steps == 0:
            return True
        return bool(end_of_epoch and self.every_epochs and epoch % self.every_epochs == 0)

    def best(
        self,
        checkpoints: Sequence[T],
        metrics: Callable[[T], Mapping[str, object] | None],
        seq: Callable[[T], int],
    ) -> T | None:
        """The best of `checkpoints` by `best_metric` (see the module docstring); None when
        the policy names no metric or no checkpoint reports it."""
        name = self.best_metric
        if not name:
            return None
        scored = [(c, _score(metrics(c), name)) for c in checkpoints]
        ranked = [(c, s) for c, s in scored if s is not None]
        if not ranked:
            return None
        sign = 1.0 if self.best_mode == "min" else -1.0
        return min(ranked, key=lambda pair: (sign * pair[1], -seq(pair[0])))[0]

    def named_best(
        self,
        checkpoints: Sequence[T],
        metrics: Callable[[T], Mapping[str, object] | None],
        seq: Callable[[T], int],
    ) -> T | None:
        """The checkpoint a job's `best` names: `best` by `best_metric`; the latest (highest
        seq) when the policy names no metric; None when there is no checkpoint, or when no
        checkpoint reports the metric it names."""
        if not self.best_metric:
            return max(checkpoints, key=seq, default=None)
        return self.best(checkpoints, metrics=metrics, seq=seq)


def _score(metrics: Mapping[str, object] | None, name: str) -> float | None:
    value = (metrics or {}).get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
