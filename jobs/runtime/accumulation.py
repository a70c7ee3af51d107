"""Gradient accumulation under DDP.

DDP all-reduces gradients in every backward pass. When several micro-batches make one
optimizer step, only the last backward needs that; the others run inside ``no_sync()`` and
just add to the local gradients, which saves (accum_steps - 1) all-reduces per step and
gives the same update as one large batch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from torch import nn
from torch.nn.parallel import DistributedDataParallel


def is_accumulation_boundary(micro_step: int, accum_steps: int) -> bool:
    """Whether 0-based `micro_step` is the last micro-batch of its optimizer step."""
    if accum_steps < 1:
        raise ValueError(f"accum_steps must be >= 1, got {accum_steps}")
    return (micro_step + 1) % accum_steps == 0


def accumulation_context(
    model: nn.Module, micro_step: int, accum_steps: int, *, force_sync: bool = False
) -> AbstractContextManager[None]:
    """Wrap forward+backward of 0-based `micro_step`: ``model.no_sync()`` unless it is the
    step's last micro-batch (or `force_sync`, e.g. a short last step at an epoch's end).

    Scale each micro-batch's loss by 1 / accum_steps so the sum matches the large batch's
    mean. A model that is not DDP-wrapped gets a no-op context.
    """
    boundary = is_accumulation_boundary(micro_step, accum_steps)
    if isinstance(model, DistributedDataParallel) and not (boundary or force_sync):
        return model.no_sync()
    return nullcontext()
