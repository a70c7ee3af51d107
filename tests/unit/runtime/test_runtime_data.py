"""Sharded loading: every sample once per epoch, a new order per epoch, exact mid-epoch skip."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from jobs.runtime import (
    DistContext,
    batches_per_epoch,
    make_loader,
    seed_everything,
    start_epoch,
)


def rank_ctx(rank: int, world_size: int) -> DistContext:
    """A rank's context; the sampler needs no process group to shard."""
    return DistContext(rank, rank, world_size, torch.device("cpu"), "gloo", rank == 0)


def epoch_samples(loader: DataLoader[int], epoch: int, skip: int = 0) -> list[int]:
    return [int(v) for batch in start_epoch(loader, epoch, skip_batches=skip) for v in batch]


DATA = list(range(11))


def test_each_epoch_covers_every_sample_across_ranks() -> None:
    loaders = [make_loader(DATA, 2, shuffle=True, seed=3, ctx=rank_ctx(r, 2)) for r in (0, 1)]
    for epoch in (1, 2):
        shards = [epoch_samples(loader, epoch) for loader in loaders]
        assert len(shards[0]) == len(shards[1]) == 6, "padded to equal shards"
        assert sorted(set(shards[0]) | set(shards[1])) == DATA
        assert len(shards[0] + shards[1]) == 12, "one sample repeated as padding, no more"
    assert epoch_samples(loaders[0], 1) != epoch_samples(loaders[0], 2), "set_epoch reshuffles"
    assert epoch_samples(loaders[0], 2) == epoch_samples(loaders[0], 2), "and deterministically"


def test_skipping_batches_resumes_exactly_where_an_epoch_stopped() -> None:
    loader = make_loader(DATA, 2, shuffle=True, seed=0, ctx=rank_ctx(1, 2))
    full = epoch_samples(loader, 4)
    resumed = epoch_samples(loader, 4, skip=2)
    assert resumed == full[4:], "neither repeats nor skips a sample"
    assert batches_per_epoch(loader) == 3 and len(loader) == 1
    assert epoch_samples(loader, 5) == epoch_samples(loader, 5), "the skip ends with its epoch"
    assert len(epoch_samples(loader, 5)) == 6


def test_drop_last_and_a_single_process_world() -> None:
    loader = make_loader(DATA, 4, shuffle=False, seed=0, ctx=rank_ctx(0, 1), drop_last=True)
    assert batches_per_epoch(loader) == 2
    assert epoch_samples(loader, 1) == list(range(8))
    with pytest.raises(ValueError):
        start_epoch(DataLoader(TensorDataset(torch.arange(4))), 1, skip_batches=1)


def test_seed_everything_makes_runs_repeat() -> None:
    def draw() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    seed_everything(7)
    first = draw()
    seed_everything(7)
    assert draw() == first
