"""Process group and device set-up from the environment, and the collectives a loop needs.

A script calls ``setup_distributed()`` (or uses ``with distributed() as ctx:``) once. Under
torchrun it joins the process group that torchrun's RANK/WORLD_SIZE/MASTER_* describe;
under a plain ``python train.py`` it makes a one-process world and never touches
torch.distributed, so the same script runs both ways. Every helper here is the identity
in a one-process world.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.distributed_c10d import _abort_process_group
from torch.nn.parallel import DistributedDataParallel

from jobs.runtime import env
from jobs.runtime.failure import record_rank_error, record_rank_finished

log = logging.getLogger(__name__)


class DistributedSetupError(RuntimeError):
    """The requested device or backend cannot be used on this machine."""


@dataclass(frozen=True)
class DistContext:
    """Who this process is in the job and where its tensors live."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str
    is_main: bool

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1


_context: DistContext | None = None
_teardown_hooks: list[Callable[[], None]] = []


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


def launched_by_torchrun() -> bool:
    """torchrun (torch.distributed.run) always sets TORCHELASTIC_RUN_ID for its workers."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID")) and "RANK" in os.environ


def _pick_device(local_rank: int) -> torch.device:
    choice = env.device_choice()
    use_cuda = choice == "cuda" or (choice == "auto" and torch.cuda.is_available())
    if not use_cuda:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise DistributedSetupError(f"{env.DEVICE}=cuda but CUDA is not available here")
    count = torch.cuda.device_count()
    if local_rank >= count:
        raise DistributedSetupError(
            f"local rank {local_rank} has no GPU: only {count} visible; "
            "lower nproc_per_node or use device: cpu"
        )
    return torch.device("cuda", local_rank)


def _pick_backend(device: torch.device) -> str:
    choice = env.backend_choice()
    if choice == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if choice == "nccl" and device.type != "cuda":
        raise DistributedSetupError("backend nccl needs CUDA devices; use gloo on CPU")
    return choice


def setup_distributed() -> DistContext:
    """Pick the device and backend from LAUNCHBAY_DEVICE/BACKEND and join the process group.

    The group is initialised only when WORLD_SIZE > 1 or the process was started by torchrun
    (a one-rank torchrun job still gets a group, so collectives behave as in larger jobs).
    Calling it again returns the same context.
    """
    global _context
    if _context is not None:
        return _context
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    world_size = _env_int("WORLD_SIZE", 1)
    device = _pick_device(local_rank)
    backend = _pick_backend(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_available() and not dist.is_initialized():
        if world_size > 1 or launched_by_torchrun():
            kwargs: dict[str, Any] = {}
            timeout_s = env.collective_timeout_s()
            if timeout_s is not None:
                kwargs["timeout"] = timedelta(seconds=timeout_s)
            if device.type == "cuda":
                kwargs["device_id"] = device
            dist.init_process_group(backend=backend, **kwargs)
    if dist.is_available() and dist.is_initialized():
        rank, world_size = dist.get_rank(), dist.get_world_size()
    _context = DistContext(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        device=device,
        backend=backend,
        is_main=rank == 0,
    )
    return _context


def at_teardown(hook: Callable[[], None]) -> None:
    """Call `hook` in every `teardown_distributed` and `abort_distributed` (the events module
    closes its file there)."""
    _teardown_hooks.append(hook)


def teardown_distributed() -> None:
    """Write the metric lines report() has queued, and leave the process group (if any) so
    torchrun sees a clean exit; safe to call twice. (A process that ends with os._exit, as
    a forked multiprocessing child does, runs no exit handler that would write them.)"""
    _close_reporting()
    _leave_group()


def _close_reporting() -> None:
    global _context
    _context = None
    for hook in _teardown_hooks:
        hook()


def _leave_group() -> None:
    if dist.is_available() and dist.is_initialized():
        # DDP wrappers sit in reference cycles: unless collected now, they keep the gloo
        # group alive until interpreter exit, where its threads die with "terminate called
        # without an active exception" (SIGABRT) on a loaded machine.
        gc.collect()
        dist.destroy_process_group()


def abort_distributed() -> None:
    """Leave the process group without waiting for anyone, on the error path.

    After a failure a collective may still be pending (a peer dead or stuck):
    `destroy_process_group` can then block on NCCL's teardown until the watchdog kills the
    rank with SIGABRT, while an abort returns at once (torch's `_abort_process_group`, what
    torch 2.13 offers; it aborts gloo's group too). Safe to call twice."""
    global _context
    _context = None
    for hook in _teardown_hooks:
        hook()
    if dist.is_available() and dist.is_initialized():
        _abort_process_group()
        gc.collect()  # the DDP wrappers' cycles hold the aborted group (see teardown)


@contextmanager
def distributed() -> Iterator[DistContext]:
    """``with distributed() as ctx:`` sets up, and always leaves the group, also on error:
    on success it tears the group down (every rank meets first); on an error it records the
    rank's error (`jobs.runtime.failure`) and then aborts the group (`abort_distributed`),
    as torchtitan does, so no pending collective keeps a failed rank from exiting."""
    ctx = setup_distributed()
    try:
        yield ctx
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            record_rank_error(exc)
        abort_distributed()
        raise
    # On success every rank meets here first: a rank that tore gloo down while a peer was
    # still at work (rank 0 saving its last checkpoint) was seen to abort at exit. Past the
    # barrier every rank's work is done and said so before the group is left: a peer's abort
    # at exit has torchrun stop this rank, maybe inside the teardown, and the job is still
    # complete (`worker.outcome.aborted_after_finishing`).
    barrier()
    _close_reporting()
    record_rank_finished()
    _leave_group()


def get_context() -> DistContext:
    """The context from setup_distributed(), or a one-process CPU world when it was not called."""
    if _context is not None:
        return _context
    return DistContext(
        rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo", is_main=True
    )


def current_context() -> DistContext | None:
    """The context from setup_distributed() until teardown_distributed(); else None."""
    return _context


def get_rank() -> int:
    """This process's global rank, also before or without setup_distributed()."""
    if _context is not None:  # report() asks every step: the group's own lookup costs more
        return _context.rank
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return _env_int("RANK", 0)


def _group_active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def barrier() -> None:
    """Wait for every rank; a no-op in a one-process world."""
    if _group_active():
        dist.barrier()


def reduce_mean(tensor: torch.Tensor | float) -> torch.Tensor:
    """The mean of `tensor` over all ranks, as a detached float copy (the input is unchanged).

    Used for reporting: each rank's loss only covers its shard, so rank 0's own value is not
    the job's loss. Every rank must call it at the same point of the loop.
    """
    value = torch.as_tensor(tensor).detach()
    origin = value.device
    if not value.is_floating_point():
        value = value.float()
    if not _group_active():
        return value.clone()
    work = value.to(get_context().device, copy=True)
    dist.all_reduce(work, op=dist.ReduceOp.SUM)
    work /= dist.get_world_size()
    return work.to(origin)


def gather_eval(tensor: torch.Tensor, num_samples: int) -> torch.Tensor:
    """All per-rank eval outputs in sampler order, each of the `num_samples` samples once.

    DistributedSampler deals index i of its (possibly shuffled) list to rank i % world and
    pads the list by repeating its head so every rank gets as many samples. Interleaving the
    ranks' outputs rebuilds that list, and cutting it at `num_samples` drops the padding, so
    a metric over the result counts every sample exactly once. With shuffle=False the result
    is in dataset order. `tensor` has the per-rank samples along dim 0.
    """
    if tensor.dim() == 0:
        raise ValueError("gather_eval needs per-sample outputs along dim 0, got a scalar")
    if not _group_active():
        return tensor[:num_samples]
    world = dist.get_world_size()
    device = get_context().device
    is_bool = tensor.dtype == torch.bool
    local = (tensor.to(torch.uint8) if is_bool else tensor).detach().to(device).contiguous()
    sizes = [torch.zeros(1, dtype=torch.long, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([local.shape[0]], dtype=torch.long, device=device))
    counts = [int(s.item()) for s in sizes]
    longest = max(counts)
    if local.shape[0] < longest:
        pad = local.new_zeros((longest - local.shape[0], *local.shape[1:]))
        local = torch.cat([local, pad])
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local)
    # (world, longest, ...) -> (longest, world, ...): row j holds sample j of every rank.
    stacked = torch.stack(parts).transpose(0, 1).reshape(longest * world, *local.shape[1:])
    rows = torch.arange(longest, device=device).unsqueeze(1)
    valid = (rows < torch.tensor(counts, device=device).unsqueeze(0)).reshape(-1)
    merged = stacked[valid][:num_samples]
    merged = merged.to(tensor.device)
    return merged.bool() if is_bool else merged


def prepare_model(model: nn.Module, ctx: DistContext | None = None, **ddp_kwargs: Any) -> nn.Module:
    """Move `model` to the context's device and wrap it in DDP when there is more than one rank."""
    ctx = ctx or get_context()
    model = model.to(ctx.device)
    if not ctx.is_distributed:
        return model
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids, **ddp_kwargs)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain module inside DDP / DataParallel / torch.compile wrappers."""
    while True:
        if isinstance(model, DistributedDataParallel | nn.DataParallel):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod  # type: ignore[assignment]
        else:
            return model
