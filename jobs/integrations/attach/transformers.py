"""Capture for Hugging Face `Trainer`, attached when the program imports `transformers.trainer`.

- Every Trainer made gets `CaptureCallback` (unless it has `LaunchbayCallback` already): each
  dict Trainer logs becomes a metric line at `global_step`, and each `checkpoint-N/` it saves
  is registered whole once every rank has written its part (each rank saves its own
  `rng_state_<rank>.pth`).
- `train()` without `resume_from_checkpoint`, in a retried attempt, resumes from the Trainer
  checkpoint Launchbay gives back (LAUNCHBAY_RESUME_FROM): weights, optimizer, scheduler, RNG
  and Trainer state. A program that passes its own keeps it.
- With `report_to` naming TensorBoard, Trainer's event files (its `logging_dir`; all runs'
  under the default one) are not read again as TensorBoard scalars.
"""

from pathlib import Path
from types import ModuleType
from typing import Any

from jobs.integrations.attach.common import (
    CaptureHost,
    allow_cpu_index_locations,
    every_rank_saved,
    framework_saving,
    register_checkpoint,
    resume_path,
)
from jobs.integrations.phases import phases
from jobs.integrations.transformers import LaunchbayCallback

TRAINER_STATE = "trainer_state.json"


def trainer_tensorboard_dir(args: Any) -> Path:
    """Where this Trainer's TensorBoard files go: its `logging_dir`, or, when that is the
    default (``<output_dir>/runs/<date>_<host>``, new each run), every run's: ``runs``."""
    logging_dir = Path(args.logging_dir)
    default = Path(args.output_dir) / "runs"
    return default if logging_dir.parent == default else logging_dir


def trainer_checkpoint_to_resume() -> Path | None:
    """The Trainer checkpoint directory LAUNCHBAY_RESUME_FROM names (or holds a file of)."""
    path = resume_path()
    if path is None:
        return None
    folder = path if path.is_dir() else path.parent
    return folder if (folder / TRAINER_STATE).is_file() else None


class CaptureCallback(LaunchbayCallback):
    """`LaunchbayCallback`, keeping the checkpoints Trainer saves in any `output_dir`."""

    def __init__(self, capture: CaptureHost) -> None:
        self.capture = capture

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        every_rank_saved()
        phases.saved(int(state.global_step))
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not folder.is_dir():
            self.capture.note(f"Trainer's checkpoint {folder} not found: not kept")
            return
        epoch = int(state.epoch) if state.epoch is not None else None
        register_checkpoint(self.capture, folder, step=int(state.global_step), epoch=epoch)


def _init(original: Any, capture: CaptureHost) -> Any:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        try:
            callbacks = self.callback_handler.callbacks
            if not any(isinstance(c, LaunchbayCallback) for c in callbacks):
                self.add_callback(CaptureCallback(capture))
            if "tensorboard" in (self.args.report_to or []) and self.args.logging_dir:
                capture.skip_tensorboard(trainer_tensorboard_dir(self.args))
        except Exception as exc:
            capture.note(f"this Trainer is not captured ({type(exc).__name__}: {exc})")

    return __init__


def _train(original: Any, capture: CaptureHost) -> Any:
    def train(self: Any, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any) -> Any:
        if resume_from_checkpoint is None:
            found = trainer_checkpoint_to_resume()
            if found is not None:
                if self.is_world_process_zero():
                    capture.note(f"resuming Trainer from {found.name} (resume_from_checkpoint)")
                resume_from_checkpoint = str(found)
        return original(self, resume_from_checkpoint, *args, **kwargs)

    return train


def _saving(original: Any) -> Any:
    def _save_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        with framework_saving():
            return original(self, *args, **kwargs)

    return _save_checkpoint


def attach(framework: str, module: ModuleType, capture: CaptureHost) -> None:
    allow_cpu_index_locations()
    trainer = module.Trainer
    capture.wrap(trainer, "__init__", lambda original: _init(original, capture))
    capture.wrap(trainer, "train", lambda original: _train(original, capture))
    if hasattr(trainer, "_save_checkpoint"):  # DeepSpeed's save inside it is part of it
        capture.wrap(trainer, "_save_checkpoint", _saving)
