"""The training loop the built-in recipes share (imports torch; used inside the ranks).

A recipe builds its data, model and optimizer, then hands them to fit(), which owns the
loop's state (step, epoch, sampler position) and the Launchbay duties: resume from
LAUNCHBAY_RESUME_FROM, AMP, reporting the rank-averaged loss and the held-out metrics,
and checkpointing per LAUNCHBAY_CHECKPOINT and at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from jobs import runtime as lb
from jobs.runtime import DistContext

LossFn = Callable[[nn.Module, Any], torch.Tensor]
EvalFn = Callable[[], dict[str, float]]
StepHook = Callable[[int], None]


def say(ctx: DistContext, message: str) -> None:
    """A line for the job's log, from rank 0 only (every rank's stdout is kept)."""
    if ctx.is_main:
        print(message, flush=True)


def plan_total_steps(batches_per_epoch: int, epochs: int, steps: int | None) -> int:
    """Optimizer steps of the whole run: `steps` when set, else whole epochs."""
    if batches_per_epoch < 1:
        raise ValueError("the training split is too small for one batch per rank")
    return steps if steps is not None else epochs * batches_per_epoch


def fit(
    *,
    ctx: DistContext,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    train_loader: DataLoader[Any],
    loss_fn: LossFn,
    evaluate: EvalFn,
    total_steps: int,
    log_every_steps: int,
    scheduler: Any | None = None,
    after_step: StepHook | None = None,
    extra: dict[str, Any] | None = None,
) -> int:
    """Train to `total_steps` optimizer steps, resuming if asked; returns the final step.

    Every rank runs the same number of steps (the sampler pads the shards), so the
    collectives inside (the loss average, evaluation) line up across ranks.
    """
    bpe = lb.batches_per_epoch(train_loader)
    # One line from every rank, so each rank's log shows it started and where.
    print(
        f"rank {ctx.rank}/{ctx.world_size} on {ctx.device} ({ctx.backend}): "
        f"{bpe} batches per epoch",
        flush=True,
    )
    scaler = lb.make_grad_scaler(device=ctx.device)
    step, first_epoch, skip = 0, 1, 0
    state = lb.load_resume_state()
    if state is not None:
        lb.restore(state, model, optimizer, scheduler, scaler)
        step = int(state["step"])
        first_epoch, skip = lb.resume_position(state, bpe)
        say(ctx, f"resumed at step {step}: epoch {first_epoch}, skipping {skip} batches")
    if step >= total_steps:
        say(ctx, f"nothing to do: the checkpoint is at step {step} of {total_steps}")
        return step
    started, start_step = time.monotonic(), step
    window_loss = torch.zeros((), device=ctx.device)
    window_steps = 0
    last_epoch = math.ceil(total_steps / bpe)
    for epoch in range(first_epoch, last_epoch + 1):
        model.train()
        position = skip
        for batch in lb.start_epoch(train_loader, epoch, skip_batches=skip):
            optimizer.zero_grad(set_to_none=True)
            with lb.autocast(ctx):
                loss = loss_fn(model, batch)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if scheduler is not None:
                scheduler.step()
            step += 1
            position += 1
            window_loss += loss.detach().float()
            window_steps += 1
            if after_step is not None:
                after_step(step)
            end_of_epoch = position == bpe or step == total_steps
            metrics: dict[str, float] = {}
            if step % log_every_steps == 0 or end_of_epoch:
                metrics["loss"] = lb.reduce_mean(window_loss / window_steps).item()
                metrics["lr"] = float(optimizer.param_groups[0]["lr"])
                window_loss.zero_()
                window_steps = 0
                if end_of_epoch:
                    metrics.update(evaluate())
                    model.train()
                lb.report(step, epoch, total_steps=total_steps, **metrics)
                shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
                say(ctx, f"epoch {epoch} step {step}/{total_steps} {shown}")
            if lb.checkpoint_due(step, epoch, end_of_epoch) or step == total_steps:
                path = lb.save_checkpoint(
                    model,
                    optimizer,
                    scheduler,
                    scaler,
                    step=step,
                    epoch=epoch,
                    metrics=metrics,
                    extra=extra,
                    sampler_position=position,
                )
                if path is not None:
                    say(ctx, f"checkpoint {path.name}")
            if step == total_steps:
                break
        skip = 0
        if step == total_steps:
            break
    elapsed = time.monotonic() - started
    say(ctx, f"done: {step - start_step} steps in {elapsed:.1f}s, final step {step}")
    return step


@torch.no_grad()
def evaluate_classifier(
    ctx: DistContext,
    model: nn.Module,
    loader: Iterable[Any],
    num_samples: int,
    forward: Callable[[nn.Module, Any], tuple[torch.Tensor, torch.Tensor]],
) -> dict[str, float]:
    """Held-out `val_loss` and `accuracy` over exactly `num_samples` samples.

    Each rank scores its shard (the unwrapped model: no DDP collectives per batch), then
    gather_eval() collects the per-sample results and drops the sampler's padding.
    `forward(model, batch)` returns (logits, labels) on the context's device.
    """
    net = lb.unwrap_model(model)
    net.eval()
    losses: list[torch.Tensor] = []
    hits: list[torch.Tensor] = []
    for batch in loader:
        with lb.autocast(ctx):
            logits, labels = forward(net, batch)
        logits = logits.float()
        losses.append(F.cross_entropy(logits, labels, reduction="none"))
        hits.append(logits.argmax(dim=1) == labels)
    empty = torch.zeros(0, device=ctx.device)
    all_losses = lb.gather_eval(torch.cat(losses) if losses else empty, num_samples)
    all_hits = lb.gather_eval(torch.cat(hits) if hits else empty.bool(), num_samples)
    return {
        "val_loss": all_losses.mean().item(),
        "accuracy": all_hits.float().mean().item(),
    }
