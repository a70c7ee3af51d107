"""A tracker for Hugging Face accelerate: ``Accelerator(log_with=LaunchbayTracker())``, then
``accelerator.init_trackers(...)`` and ``accelerator.log({"loss": 0.3}, step=step)`` report
to Launchbay (the events file, on the main process), as ``lb.report`` does.

Importing this module imports accelerate; Launchbay itself never does.
"""

import math
from typing import Any

from accelerate.tracking import GeneralTracker, on_main_process

from jobs.runtime.events import clean_metrics, close_events, write_event


def split_epoch(values: dict[str, Any]) -> tuple[int | None, dict[str, Any]]:
    """(the epoch as the protocol's whole number, the other values). Frameworks log the
    epoch as a float (2.5: half-way through the third); the line keeps its whole part and
    the exact value as the metric `epoch`."""
    rest = dict(values)
    epoch = rest.get("epoch")
    if isinstance(epoch, int | float) and not isinstance(epoch, bool) and math.isfinite(epoch):
        return int(math.floor(epoch)), rest
    rest.pop("epoch", None)
    return None, rest


def report_values(step: int, values: dict[str, Any]) -> bool:
    """One metric line of `values` at `step` (its numbers; `epoch` as `split_epoch` says):
    the names are free here (`epoch`, `eval/loss`), unlike keyword arguments of `lb.report`."""
    epoch, rest = split_epoch(values)
    metrics = clean_metrics(rest)
    if not metrics:
        return False
    return write_event({"type": "metric", "step": step, "epoch": epoch, "metrics": metrics})


class LaunchbayTracker(GeneralTracker):
    """Reports what `Accelerator.log` is given: numbers become metric points at `step` (the
    tracker counts steps itself when none is given); strings and other values are skipped."""

    name = "launchbay"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, run_name: str = "launchbay") -> None:
        super().__init__()
        self.run_name = run_name
        self._last_step = 0

    @property
    def tracker(self) -> "LaunchbayTracker":
        return self

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Hyperparameters are the job spec's (`config`, `args`): nothing to report."""

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if step is None:
            step = self._last_step + 1
        self._last_step = int(step)
        report_values(int(step), values)

    @on_main_process
    def finish(self) -> None:
        close_events()
