"""Atomic checkpoints that Launchbay can register, and resuming from them.

A checkpoint is a dict saved with torch.save:

    {"format": 1, "model": <unwrapped state_dict>, "optimizer": ..., "scheduler": ...,
     "scaler": ..., "step": int, "epoch": int, "sampler_position": int,
     "metrics": {...}, "extra": {...}, "job_id": ..., "attempt": ..., "world_size": ...}

The model's state_dict is the unwrapped module's (no "module." prefix), so the file loads
into a plain model with strict=True, as the README's contract requires. Every tensor in it is
on the CPU (copied there from the GPU; the model and optimizer keep theirs), so a downloaded
checkpoint loads on a machine without CUDA even without `map_location`. The file is complete on disk
(temp name, fsync, rename, fsync of the directory) before its line is written to the
events file, because the worker copies a checkpoint as soon as it reads that line.

Only rank 0 writes and nothing in here is a collective, so the other ranks go straight on;
call barrier() afterwards if every rank needs the file.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from jobs.contract.events import checkpoint_line
from jobs.runtime import env
from jobs.runtime.distributed import get_context, get_rank, unwrap_model
from jobs.runtime.env import CheckpointPolicy, checkpoint_policy
from jobs.runtime.events import clean_metrics, write_event
from jobs.runtime.marks import CHECKPOINT_SAVE, drop_mark, end_mark, start_mark

CHECKPOINT_FORMAT = 1


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint at `step`; zero-padded so names sort by step."""
    return f"step-{step:09d}.pt"


def _state_dict(obj: Any) -> Any:
    return on_cpu(obj.state_dict()) if obj is not None else None


def on_cpu(state: Any) -> Any:
    """`state` with every tensor in it on the CPU: a tensor elsewhere is copied, one already
    there is kept as it is; dicts (with a state_dict's `_metadata`), lists and tuples are
    rebuilt around them."""
    if isinstance(state, torch.Tensor):
        return state if state.device.type == "cpu" else state.to("cpu")
    if isinstance(state, Mapping):
        rebuilt = OrderedDict if isinstance(state, OrderedDict) else dict
        moved = rebuilt((key, on_cpu(value)) for key, value in state.items())
        metadata = getattr(state, "_metadata", None)
        if metadata is not None:
            moved._metadata = metadata  # type: ignore[attr-defined]
        return moved
    if isinstance(state, list):
        return [on_cpu(item) for item in state]
    if isinstance(state, tuple) and not hasattr(state, "_fields"):
        return tuple(on_cpu(item) for item in state)
    return state


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable; some filesystems refuse fsync on a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: torch.amp.GradScaler | None = None,
    *,
    step: int,
    epoch: int,
    metrics: Mapping[str, object] | None = None,
    extra: Mapping[str, Any] | None = None,
    sampler_position: int = 0,
) -> Path | None:
    """Save a resumable checkpoint into $LAUNCHBAY_CHECKPOINT_DIR (rank 0; others get None).

    `sampler_position` is how many batches of `epoch` this rank has consumed (use the
    epoch's full batch count when saving at its end); resume_position() turns it back into
    where to start. `extra` holds anything else the script needs to resume; keep it to
    tensors, numbers, strings, lists and dicts so it loads with weights_only=True.
    Returns the checkpoint's path.
    """
    if get_rank() != 0:
        return None
    start_mark(CHECKPOINT_SAVE)  # the loop waits for all of it (docs/goodput.md)
    directory = env.checkpoint_dir()
    directory.mkdir(parents=True, exist_ok=True)
    clean = clean_metrics(metrics or {})
    state: dict[str, Any] = {
        "format": CHECKPOINT_FORMAT,
        "model": on_cpu(unwrap_model(model).state_dict()),
        "optimizer": _state_dict(optimizer),
        "scheduler": _state_dict(scheduler),
        "scaler": _state_dict(scaler),
        "step": int(step),
        "epoch": int(epoch),
        "sampler_position": int(sampler_position),
        "metrics": clean,
        "extra": on_cpu(dict(extra or {})),
        "job_id": env.job_id(),
        "attempt": env.attempt(),
        "world_size": get_context().world_size,
        "saved_at": time.time(),
    }
    name = checkpoint_name(step)
    final = directory / name
    # A dot name in the same directory: the rename stays atomic and nobody takes it for done.
    temp = directory / f".{name}.tmp-{os.getpid()}"
    try:
        with open(temp, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, final)
    except BaseException:
        temp.unlink(missing_ok=True)
        drop_mark(CHECKPOINT_SAVE)  # no checkpoint, no line
        raise
    _fsync_dir(directory)
    end_mark(CHECKPOINT_SAVE, int(step))
    write_event(checkpoint_line(name, int(step), int(epoch), clean))
    return final


def resume_checkpoint_path() -> Path | None:
    """The checkpoint named by LAUNCHBAY_RESUME_FROM; a relative name is looked up in the
    checkpoint directory when it is not found from the working directory."""
    path = env.resume_from()
    if path is None:
        return None
    if not path.is_absolute() and not path.exists():
        candidate = env.checkpoint_dir() / path
        if candidate.exists():
            return candidate
    return path


def load_resume_state(
    map_location: str | torch.device = "cpu", *, weights_only: bool = True
) -> dict[str, Any] | None:
    """The checkpoint to resume from (LAUNCHBAY_RESUME_FROM), or None for a fresh start.

    Every rank loads it (to CPU by default: load_state_dict then copies to the model's
    device, and ranks do not all land on cuda:0). A named file that is missing raises
    FileNotFoundError rather than silently starting over.
    """
    path = resume_checkpoint_path()
    if path is None:
        return None
    if not path.is_file():
        raise FileNotFoundError(f"{env.RESUME_FROM}={path}: no such checkpoint file")
    state = torch.load(path, map_location=map_location, weights_only=weights_only)
    if not isinstance(state, dict) or "model" not in state:
        raise ValueError(f"{path} is not a Launchbay checkpoint (no 'model' entry)")
    return state


def restore(
    state: Mapping[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any | None = None,
    scaler: torch.amp.GradScaler | None = None,
    *,
    strict: bool = True,
) -> None:
    """Load a checkpoint's states into the (possibly DDP-wrapped) model and its helpers.

    Call it on every rank, after wrapping the model and building the optimizer. A state
    saved with a "module." prefix (by code not using this SDK) is accepted too.
    """
    model_state = dict(state["model"])
    consume_prefix_in_state_dict_if_present(model_state, "module.")
    unwrap_model(model).load_state_dict(model_state, strict=strict)
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    # A disabled scaler saves {}; loading that into an enabled one would raise.
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])


def resume_position(state: Mapping[str, Any], batches_per_epoch: int) -> tuple[int, int]:
    """(epoch to run next, batches of it to skip) for a checkpoint saved by save_checkpoint.

    A checkpoint taken at an epoch's end (sampler_position == batches_per_epoch) resumes
    at the start of the following epoch; epochs are numbered as the saving script did.
    """
    epoch = int(state["epoch"])
    position = int(state.get("sampler_position", 0))
    if position >= batches_per_epoch:
        return epoch + 1, 0
    return epoch, position


def checkpoint_due(
    step: int, epoch: int, end_of_epoch: bool, policy: CheckpointPolicy | None = None
) -> bool:
    """Whether LAUNCHBAY_CHECKPOINT (every_steps / every_epochs) asks for a checkpoint now.

    Call it after optimizer step `step` (1-based); `end_of_epoch` is True after the
    epoch's last step. Every rank gets the same answer, so they stay in step.
    """
    return (policy or checkpoint_policy()).is_due(step, epoch, end_of_epoch)
