"""Seeding and sharded, resumable data loading.

Every rank must see a disjoint shard of each epoch and a new shuffle every epoch
(DistributedSampler + set_epoch), and a job resumed from a mid-epoch checkpoint must pick
up at the next unseen batch: repeating or skipping samples would make a resumed job train
on different data than an uninterrupted one. The sampler here can skip the first samples
of one epoch without loading them, which is what "sampler position" restores.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from jobs.runtime.distributed import DistContext, get_context


def seed_everything(seed: int, *, deterministic: bool = False) -> None:
    """Seed Python, NumPy and torch (CPU and every GPU) with the same `seed` on every rank.

    Use the same seed on all ranks: the model then starts identical everywhere (DDP also
    broadcasts rank 0's weights) and the samplers agree on each epoch's shuffle.
    `deterministic` additionally asks torch for deterministic kernels (slower on GPUs).
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False


class ResumableDistributedSampler(DistributedSampler[Any]):
    """A DistributedSampler that can start one epoch after its first `skip_samples` samples.

    The epoch's order is the plain DistributedSampler's (seed + epoch), so skipping k
    batches yields exactly the batches an uninterrupted run would have seen next.
    The skip applies until the next set_epoch() call.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        num_replicas: int,
        rank: int,
        shuffle: bool,
        seed: int,
        drop_last: bool,
    ) -> None:
        super().__init__(
            dataset,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )
        self.skip_samples = 0

    def set_epoch(self, epoch: int, skip_samples: int = 0) -> None:
        if skip_samples < 0:
            raise ValueError(f"skip_samples must be >= 0, got {skip_samples}")
        super().set_epoch(epoch)
        self.skip_samples = skip_samples

    def __iter__(self) -> Iterator[Any]:
        indices = list(super().__iter__())
        return iter(indices[self.skip_samples :])

    def __len__(self) -> int:
        return max(0, self.num_samples - self.skip_samples)


def make_loader(
    dataset: Dataset[Any] | Sequence[Any],
    batch_size: int,
    *,
    shuffle: bool,
    seed: int,
    ctx: DistContext | None = None,
    drop_last: bool = False,
    **loader_kwargs: Any,
) -> DataLoader[Any]:
    """A DataLoader over this rank's shard of `dataset`.

    `batch_size` is per rank (the job's global batch is batch_size * world_size). The
    sampler is a ResumableDistributedSampler in every world size, one-process included,
    so shuffling, epochs and resuming behave the same everywhere. Call start_epoch()
    before iterating each epoch. `dataset` may be any sequence (a list of examples);
    `loader_kwargs` go to DataLoader (collate_fn, ...).
    """
    ctx = ctx or get_context()
    dataset = cast(Dataset[Any], dataset)
    sampler = ResumableDistributedSampler(
        dataset,
        num_replicas=ctx.world_size,
        rank=ctx.rank,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
    )
    return DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last, **loader_kwargs
    )


def start_epoch(loader: DataLoader[Any], epoch: int, *, skip_batches: int = 0) -> DataLoader[Any]:
    """Reshuffle for `epoch` (sampler.set_epoch) and optionally skip its first batches.

    Returns the loader, for ``for batch in start_epoch(loader, epoch): ...``. Forgetting
    set_epoch is the classic DDP bug: every epoch then repeats the first epoch's order.
    """
    sampler = loader.sampler
    if isinstance(sampler, ResumableDistributedSampler):
        if loader.batch_size is None:
            raise ValueError("skipping batches needs a loader with a fixed batch_size")
        sampler.set_epoch(epoch, skip_samples=skip_batches * loader.batch_size)
        return loader
    if skip_batches:
        raise ValueError("only loaders from make_loader() can skip batches")
    set_epoch = getattr(sampler, "set_epoch", None)
    if callable(set_epoch):
        set_epoch(epoch)
    return loader


def batches_per_epoch(loader: DataLoader[Any]) -> int:
    """Batches in a whole epoch on this rank (the same on every rank), ignoring any skip."""
    sampler = loader.sampler
    if not isinstance(sampler, ResumableDistributedSampler) or loader.batch_size is None:
        return len(loader)
    if loader.drop_last:
        return sampler.num_samples // loader.batch_size
    return math.ceil(sampler.num_samples / loader.batch_size)
