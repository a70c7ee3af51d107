"""Recipe `synthetic`: linear regression on generated data, in a few seconds.

For tests of the whole path (launch, metrics, checkpoints, resume, failures) rather than
for learning anything: `fail_on_rank` makes one rank raise after its first step and
`sleep_per_step_s` stretches the run.
Run: ``torchrun --nproc_per_node 2 -m jobs.recipes.synthetic``.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import record
from torch.utils.data import TensorDataset

from jobs import runtime as lb
from jobs.recipes.configs import SyntheticConfig
from jobs.recipes.loop import fit, plan_total_steps, say
from jobs.runtime import DistContext


def make_data(config: SyntheticConfig) -> tuple[TensorDataset, TensorDataset]:
    """y = x @ w + b + noise, from a generator seeded by the config (the same on every rank)."""
    gen = torch.Generator().manual_seed(config.seed)
    x = torch.randn(config.num_samples, config.features, generator=gen)
    weight = torch.randn(config.features, 1, generator=gen)
    y = x @ weight + 0.5 + config.noise * torch.randn(config.num_samples, 1, generator=gen)
    n_val = max(1, int(config.num_samples * config.val_fraction))
    return TensorDataset(x[n_val:], y[n_val:]), TensorDataset(x[:n_val], y[:n_val])


@torch.no_grad()
def evaluate(ctx: DistContext, model: nn.Module, val_set: TensorDataset) -> dict[str, float]:
    """Held-out mean squared error over every validation sample exactly once."""
    net = lb.unwrap_model(model)
    net.eval()
    loader = lb.make_loader(val_set, 256, shuffle=False, seed=0, ctx=ctx)
    errors = [((net(x.to(ctx.device)) - y.to(ctx.device)) ** 2).squeeze(1) for x, y in loader]
    all_errors = lb.gather_eval(torch.cat(errors), len(val_set))
    return {"val_loss": all_errors.mean().item()}


def train(config: SyntheticConfig, ctx: DistContext) -> int:
    lb.seed_everything(config.seed)
    train_set, val_set = make_data(config)
    model = lb.prepare_model(nn.Linear(config.features, 1), ctx)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    loader = lb.make_loader(train_set, config.batch_size, shuffle=True, seed=config.seed, ctx=ctx)
    total = plan_total_steps(lb.batches_per_epoch(loader), config.epochs, config.steps)
    say(
        ctx,
        f"synthetic: {len(train_set)} train / {len(val_set)} held-out samples, "
        f"{total} steps, world {ctx.world_size} on {ctx.device}",
    )
    started_steps = 0

    def after_step(step: int) -> None:
        nonlocal started_steps
        started_steps += 1
        if config.fail_on_rank == ctx.rank and started_steps == 1:
            raise RuntimeError(f"synthetic failure on rank {ctx.rank}")
        if config.sleep_per_step_s:
            time.sleep(config.sleep_per_step_s)

    def loss_fn(net: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(net(x.to(ctx.device)).float(), y.to(ctx.device))

    return fit(
        ctx=ctx,
        model=model,
        optimizer=optimizer,
        train_loader=loader,
        loss_fn=loss_fn,
        evaluate=lambda: evaluate(ctx, model, val_set),
        total_steps=total,
        log_every_steps=config.log_every_steps,
        after_step=after_step,
    )


@record
def main() -> None:
    config = SyntheticConfig.model_validate(lb.read_config())
    with lb.distributed() as ctx:
        train(config, ctx)


if __name__ == "__main__":
    main()
