"""Recipe `digits`: a small CNN on scikit-learn's 8x8 handwritten digits.

The README's demo job. The data ships inside scikit-learn (no download), a stratified
held-out split is scored every epoch, and the defaults reach well over 0.9 held-out
accuracy on 2 CPU ranks in a few seconds (about 0.98).
Run: ``torchrun --nproc_per_node 2 -m jobs.recipes.digits``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import TensorDataset

from jobs import runtime as lb
from jobs.recipes.configs import DigitsConfig
from jobs.recipes.loop import evaluate_classifier, fit, plan_total_steps, say
from jobs.runtime import DistContext

NUM_CLASSES = 10


class DigitsNet(nn.Module):
    """Two 3x3 conv layers, one pooling, two linear layers: enough for 8x8 digits."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * channels * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, NUM_CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def load_splits(config: DigitsConfig) -> tuple[TensorDataset, TensorDataset]:
    """Train and held-out splits, stratified and seeded: identical on every rank."""
    images, labels = load_digits(return_X_y=True)
    images = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    x_train, x_val, y_train, y_val = train_test_split(
        images, labels, test_size=config.val_fraction, random_state=config.seed, stratify=labels
    )
    return (
        TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train).long()),
        TensorDataset(torch.from_numpy(x_val), torch.from_numpy(y_val).long()),
    )


def train(config: DigitsConfig, ctx: DistContext) -> int:
    lb.seed_everything(config.seed)
    train_set, val_set = load_splits(config)
    model = lb.prepare_model(DigitsNet(config.channels), ctx)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, weight_decay=config.weight_decay
    )
    loader = lb.make_loader(train_set, config.batch_size, shuffle=True, seed=config.seed, ctx=ctx)
    val_loader = lb.make_loader(val_set, 256, shuffle=False, seed=0, ctx=ctx)
    total = plan_total_steps(lb.batches_per_epoch(loader), config.epochs, config.steps)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=config.lr, total_steps=total, pct_start=0.2
    )
    say(
        ctx,
        f"digits: {len(train_set)} train / {len(val_set)} held-out images, "
        f"{total} steps, world {ctx.world_size} on {ctx.device}, "
        f"amp {lb.resolve_amp(device=ctx.device)}",
    )

    def to_device(batch: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return batch[0].to(ctx.device), batch[1].to(ctx.device)

    def loss_fn(net: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        x, y = to_device(batch)
        return F.cross_entropy(net(x).float(), y)

    def forward(net: nn.Module, batch: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = to_device(batch)
        return net(x), y

    return fit(
        ctx=ctx,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        train_loader=loader,
        loss_fn=loss_fn,
        evaluate=lambda: evaluate_classifier(ctx, model, val_loader, len(val_set), forward),
        total_steps=total,
        log_every_steps=config.log_every_steps,
        extra={"num_classes": NUM_CLASSES, "channels": config.channels},
    )


@record
def main() -> None:
    config = DigitsConfig.model_validate(lb.read_config())
    with lb.distributed() as ctx:
        train(config, ctx)


if __name__ == "__main__":
    main()
