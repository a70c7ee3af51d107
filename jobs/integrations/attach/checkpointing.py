"""Capture of the checkpoints DeepSpeed and torch.distributed.checkpoint save, attached when the
program imports `deepspeed.runtime.engine` or `torch.distributed.checkpoint`.

- `DeepSpeedEngine.save_checkpoint(save_dir, tag)` ends at a barrier: its tag's directory
  (``global_step8``) is then registered, at the engine's `global_steps`.
- `torch.distributed.checkpoint.save(state, checkpoint_id=...)` (or a `FileSystemWriter`) returns
  on the coordinator once the metadata is written: the directory is registered, at the last
  number in its name.

Not when the save is part of a framework's own (a Trainer's, `save_state`): that checkpoint is
registered whole. Not when it lies in LAUNCHBAY_CHECKPOINT_DIR: a program that saves there
knows Launchbay and reports its own (docs/training-scripts.md, DeepSpeed; its staging names).
An asynchronous save (`async_save`) is not followed.
"""

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from jobs.integrations.attach.common import (
    CaptureHost,
    in_framework_save,
    inside_checkpoint_dir,
    register_checkpoint,
    step_in_name,
)
from jobs.runtime.distributed import get_rank


def _keep(capture: CaptureHost, folder: Path, step: int | None) -> None:
    if in_framework_save() or get_rank() != 0 or not folder.is_dir():
        return
    if inside_checkpoint_dir(folder):
        return
    register_checkpoint(capture, folder, step=step, epoch=None)


def _deepspeed_save(original: Any, capture: CaptureHost) -> Any:
    def save_checkpoint(self: Any, save_dir: Any, tag: Any = None, *args: Any, **kw: Any) -> Any:
        result = original(self, save_dir, tag, *args, **kw)
        steps = int(getattr(self, "global_steps", 0) or 0)
        name = str(tag) if tag is not None else f"global_step{steps}"
        _keep(capture, Path(save_dir) / name, steps)
        return result

    return save_checkpoint


def _dcp_save(original: Any, capture: CaptureHost) -> Any:
    def save(state_dict: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(state_dict, *args, **kwargs)
        where = kwargs.get("checkpoint_id")
        if where is None:
            where = getattr(kwargs.get("storage_writer"), "path", None)
        if isinstance(where, str | os.PathLike):
            folder = Path(where)
            _keep(capture, folder, step_in_name(folder.name))
        return result

    return save


def attach(framework: str, module: ModuleType, capture: CaptureHost) -> None:
    if framework == "deepspeed":
        engine = module.DeepSpeedEngine
        capture.wrap(engine, "save_checkpoint", lambda original: _deepspeed_save(original, capture))
        return
    saver = importlib.import_module("torch.distributed.checkpoint.state_dict_saver")
    for owner in (saver, module):  # `dcp.save` and the function it is
        capture.wrap(owner, "save", lambda original: _dcp_save(original, capture))
