"""A `transformers.TrainerCallback` that reports to Launchbay: ``Trainer(...,
callbacks=[LaunchbayCallback()])`` and ``trainer.train(resume_from_checkpoint=
resume_from_checkpoint())``.

- Every dict Trainer logs (loss, learning_rate, grad_norm, eval_*) becomes a metric line at
  `state.global_step`, with Trainer's `max_steps` as its `total_steps` (the job's ETA);
  Trainer's float epoch (2.5) gives the line its whole part and stays exact as the metric
  `epoch` (once a step: Trainer logs it with the loss and again with the evaluation).
- Each checkpoint Trainer saves (``<output_dir>/checkpoint-<step>/``) is registered whole, as
  a directory checkpoint (weights, trainer state, optimizer, scheduler, every rank's RNG
  state), once every rank has written its part, with `output_dir` set to
  LAUNCHBAY_CHECKPOINT_DIR (`checkpoint_dir()`): a retried attempt, on this worker or another,
  resumes from that directory (`allow_cpu_index_locations` says why CPU ranks can).
- The evaluations and saves Trainer makes are marked (`eval`, `checkpoint_save`: the loop waits
  for them; docs/goodput.md), from the step end that announces them to `on_evaluate`/`on_save`.
- When training ends, every rank says it finished its work, so a rank that torch + gloo abort
  at interpreter exit does not fail the job (as on leaving `distributed()`).

Importing this module imports transformers; Launchbay itself never does.
"""

from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from jobs.integrations.attach.common import (
    allow_cpu_index_locations,
    every_rank_saved,
    register_checkpoint,
    report,
)
from jobs.integrations.phases import phases
from jobs.integrations.values import planned_steps
from jobs.runtime import env
from jobs.runtime.failure import record_rank_finished

WEIGHTS = ("model.safetensors", "pytorch_model.bin")

allow_cpu_index_locations()


def checkpoint_dir() -> str:
    """Where Trainer should save (`TrainingArguments(output_dir=...)`): the job's checkpoint
    directory under Launchbay, else ``./checkpoints``."""
    return str(env.checkpoint_dir())


def resume_from_checkpoint() -> str | None:
    """The Trainer checkpoint directory to resume from (`trainer.train(resume_from_checkpoint=
    ...)`): the one whose weights LAUNCHBAY_RESUME_FROM names; None for a fresh start."""
    path = env.resume_from()
    if path is None:
        return None
    if not path.is_absolute():
        path = env.checkpoint_dir() / path
    folder = path.parent if path.is_file() or path.name in WEIGHTS else path
    return str(folder) if folder.is_dir() else None


class LaunchbayCallback(TrainerCallback):
    """Reports Trainer's logs and registers its checkpoints (world process zero only)."""

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
    ) -> None:
        if not state.is_world_process_zero or not logs:
            return
        values = dict(logs)
        if "epoch" not in values and state.epoch is not None:
            values["epoch"] = state.epoch
        report(int(state.global_step), values, planned_steps(state.max_steps))

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        will_evaluate, will_save = bool(control.should_evaluate), bool(control.should_save)
        phases.step_ended(will_evaluate=will_evaluate, will_save=will_save)

    on_epoch_end = on_step_end

    def on_prediction_step(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        phases.predicting()

    def on_evaluate(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        phases.evaluated(int(state.global_step), will_save=bool(control.should_save))

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        every_rank_saved()  # each rank writes its own RNG state into the directory
        phases.saved(int(state.global_step))
        if not state.is_world_process_zero:
            return
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not any((folder / n).is_file() for n in WEIGHTS):
            return
        if not folder.resolve().is_relative_to(env.checkpoint_dir().resolve()):
            return  # saved outside the job's checkpoint directory: not this callback's to keep
        epoch = int(state.epoch) if state.epoch is not None else None
        register_checkpoint(None, folder, step=int(state.global_step), epoch=epoch)

    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        record_rank_finished()  # every rank, not only world process zero
