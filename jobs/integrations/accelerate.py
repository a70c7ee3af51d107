"""A tracker for Hugging Face accelerate: ``Accelerator(log_with=LaunchbayTracker())``, then
``accelerator.init_trackers(...)`` and ``accelerator.log({"loss": 0.3}, step=step)`` report
to Launchbay (the events file, on the main process), as ``lb.report`` does.

Importing this module imports accelerate; Launchbay itself never does.
"""

from typing import Any

from accelerate.tracking import GeneralTracker, on_main_process

from jobs.integrations.attach.common import report
from jobs.integrations.values import report_values, split_epoch
from jobs.runtime.events import close_events

__all__ = ["LaunchbayTracker", "report_values", "split_epoch"]


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
        report(int(step), values)

    @on_main_process
    def finish(self) -> None:
        close_events()
