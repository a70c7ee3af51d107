"""Capture for Lightning (`lightning` or `pytorch_lightning`), attached when the program imports
its `Trainer`.

- A Trainer made with loggers (Lightning's default: TensorBoard's or a CSV logger) gets one more,
  after them, that reports what the module logs (``self.log(...)``) at the trainer's step; with
  ``logger=False`` it gets none (adding one would move `ModelCheckpoint`'s default directory,
  which follows the first logger), and the log says so. A Trainer that has `LaunchbayLogger`
  already gets nothing more.
- Every checkpoint `Trainer.save_checkpoint` writes (each `ModelCheckpoint` file, a program's
  own call) is registered once it is complete, with the trainer's step and epoch; one a step
  (`save_last=True` saves the same state again as `last.ckpt`).
- Each save and each validation is marked (`checkpoint_save`, `eval`: docs/goodput.md).
- `fit()` without `ckpt_path`, in a retried attempt, resumes from the `.ckpt` Launchbay gives back.
- Event files of the Trainer's TensorBoard loggers are not read again as TensorBoard scalars.
"""

import importlib
import inspect
import os
from argparse import Namespace
from pathlib import Path
from types import ModuleType
from typing import Any

from jobs.integrations.attach.common import (
    CaptureHost,
    framework_saving,
    register_checkpoint,
    report,
    resume_path,
)
from jobs.runtime import env
from jobs.runtime.events import close_events
from jobs.runtime.failure import record_rank_finished
from jobs.runtime.marks import CHECKPOINT_SAVE, EVAL, end_mark, marked, start_mark

EXPLICIT = "LaunchbayLogger"
CAPTURE_LOGGER = "LaunchbayCaptureLogger"


def lightning_checkpoint_to_resume() -> Path | None:
    path = resume_path()
    return path if path is not None and path.is_file() and path.suffix == ".ckpt" else None


def logger_class(package: str) -> type:
    """A metrics-only Logger of `package` (checkpoints are registered by `save_checkpoint`)."""
    base: Any = importlib.import_module(f"{package}.loggers.logger").Logger
    rank_zero_only = importlib.import_module(f"{package}.utilities").rank_zero_only

    class LaunchbayCaptureLogger(base):
        @property
        def name(self) -> str:
            return "launchbay"

        @property
        def version(self) -> str:
            return env.job_id() or "local"

        @rank_zero_only
        def log_hyperparams(self, params: dict[str, Any] | Namespace, *a: Any, **k: Any) -> None:
            """Hyperparameters are the job spec's: nothing to report."""

        @rank_zero_only
        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            report(int(step or 0), dict(metrics))

        def finalize(self, status: str) -> None:
            if status == "success":
                record_rank_finished()
            if rank_zero_only.rank == 0:
                close_events()

    return LaunchbayCaptureLogger


def marks_class(package: str) -> type:
    """A Callback of `package` that marks each validation as an `eval` (docs/goodput.md)."""
    base: Any = importlib.import_module(f"{package}.callbacks").Callback

    class LaunchbayMarks(base):
        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            start_mark(EVAL)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            end_mark(EVAL, int(trainer.global_step))

    return LaunchbayMarks


def _init(original: Any, capture: CaptureHost, package: str) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            self.callbacks.append(marks_class(package)())
        except Exception as exc:
            capture.note(f"this Lightning Trainer's evaluations are not marked ({exc})")
        try:
            loggers = list(self.loggers)
            for logger in loggers:
                if type(logger).__name__ == "TensorBoardLogger" and logger.root_dir:
                    capture.skip_tensorboard(logger.root_dir)
            names = {type(logger).__name__ for logger in loggers}
            if names & {EXPLICIT, CAPTURE_LOGGER}:
                return
            if not loggers:
                capture.note(
                    "this Lightning Trainer logs nowhere (logger=False): what its module logs is "
                    "not recorded (its checkpoints are)"
                )
                return
            self.loggers = [*loggers, logger_class(package)()]
        except Exception as exc:
            capture.note(f"this Lightning Trainer's metrics are not captured ({exc})")

    return __init__


def _fit(original: Any, capture: CaptureHost) -> Any:
    signature = inspect.signature(original)

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("ckpt_path") is None:
            found = lightning_checkpoint_to_resume()
            if found is not None:
                if self.is_global_zero:
                    capture.note(f"resuming Lightning from {found.name} (ckpt_path)")
                bound.arguments["ckpt_path"] = str(found)
        return original(*bound.args, **bound.kwargs)

    return fit


# The steps a checkpoint was registered at: `ModelCheckpoint(save_last=True)` saves the same
# state twice a time (`epoch=1-step=8.ckpt`, then `last.ckpt`), kept once.
_saved_steps: set[int] = set()


def _save(original: Any, capture: CaptureHost) -> Any:
    def save_checkpoint(self: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        with framework_saving(), marked(CHECKPOINT_SAVE, int(self.global_step)):
            result = original(self, filepath, *args, **kwargs)
        # Trainer.save_checkpoint ends at a barrier: the file is complete on every rank.
        step, epoch = int(self.global_step), int(self.current_epoch)
        if self.is_global_zero and isinstance(filepath, str | os.PathLike):
            if os.path.exists(filepath) and step not in _saved_steps:
                if register_checkpoint(capture, Path(filepath), step=step, epoch=epoch):
                    _saved_steps.add(step)
        return result

    return save_checkpoint


def attach(framework: str, module: ModuleType, capture: CaptureHost) -> None:
    package = module.__name__.rsplit(".trainer", 2)[0]  # lightning.pytorch, pytorch_lightning
    trainer = module.Trainer
    capture.wrap(trainer, "__init__", lambda original: _init(original, capture, package))
    capture.wrap(trainer, "fit", lambda original: _fit(original, capture))
    capture.wrap(trainer, "save_checkpoint", lambda original: _save(original, capture))
