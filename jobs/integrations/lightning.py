"""A Lightning `Logger` that reports to Launchbay: ``Trainer(logger=LaunchbayLogger(),
callbacks=[ModelCheckpoint(dirpath=checkpoint_dir(), ...)])`` and ``trainer.fit(model,
ckpt_path=resume_from_checkpoint())``.

- What a LightningModule logs (``self.log("loss", ...)``) becomes a metric line at the
  trainer's step; Lightning's float `epoch` is handled as `LaunchbayTracker` does.
- Each checkpoint file ModelCheckpoint saves inside LAUNCHBAY_CHECKPOINT_DIR is registered;
  `resume_from_checkpoint()` gives a retried attempt the latest back.

Importing this module imports Lightning (`lightning`, else `pytorch_lightning`); Launchbay
itself never does.
"""

import re
from argparse import Namespace
from pathlib import Path
from typing import Any

try:
    from lightning.pytorch.loggers.logger import Logger
    from lightning.pytorch.utilities import rank_zero_only
except ImportError:  # the older package name
    from pytorch_lightning.loggers.logger import Logger
    from pytorch_lightning.utilities import rank_zero_only

from jobs.integrations.attach.common import register_checkpoint, report
from jobs.runtime import env
from jobs.runtime.events import close_events
from jobs.runtime.failure import record_rank_finished


def checkpoint_dir() -> str:
    """Where ModelCheckpoint should save (`dirpath=`): the job's checkpoint directory."""
    return str(env.checkpoint_dir())


def resume_from_checkpoint() -> str | None:
    """The checkpoint file to resume from (`trainer.fit(..., ckpt_path=...)`), or None."""
    path = env.resume_from()
    if path is None:
        return None
    if not path.is_absolute():
        path = env.checkpoint_dir() / path
    return str(path) if path.is_file() else None


class LaunchbayLogger(Logger):
    """Reports logged metrics and registers saved checkpoints (global rank zero only)."""

    def __init__(self) -> None:
        super().__init__()
        self._registered: set[str] = set()

    @property
    def name(self) -> str:
        return "launchbay"

    @property
    def version(self) -> str:
        return env.job_id() or "local"

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kw: Any) -> None:
        """Hyperparameters are the job spec's (`config`, `args`): nothing to report."""

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        report(int(step or 0), dict(metrics))

    @rank_zero_only
    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        saved = getattr(checkpoint_callback, "_last_checkpoint_saved", "") or ""
        if not saved or saved in self._registered or not Path(saved).is_file():
            return
        if not Path(saved).resolve().is_relative_to(env.checkpoint_dir().resolve()):
            return  # saved outside the job's checkpoint directory
        self._registered.add(saved)
        step = int(getattr(checkpoint_callback, "_last_global_step_saved", 0) or 0)
        found = re.search(r"epoch=(\d+)", Path(saved).name)  # ModelCheckpoint's default name
        epoch = int(found.group(1)) if found else None
        # Once per version of the file, also when capture registered it first.
        register_checkpoint(None, Path(saved), step=step, epoch=epoch)

    def finalize(self, status: str) -> None:
        # Every rank: one that finished its work may still be aborted at interpreter exit.
        if status == "success":
            record_rank_finished()
        if rank_zero_only.rank == 0:
            close_events()
