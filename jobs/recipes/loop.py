"""The training loop the built-in recipes share (imports torch; used inside the ranks).

A recipe builds its data, model and optimizer, then hands them to fit(), which owns the
loop's state (step, epoch, sampler position: one `TrainState`, saved and restored) and the
Launchbay duties: resume from
LAUNCHBAY_RESUME_FROM, AMP, reporting the rank-averaged loss and the held-out metrics,
and checkpointing per LAUNCHBAY_CHECKPOINT and at the end.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
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


@dataclass
class TrainState:
    """Where a run is: optimizer steps done, the epoch under way, and how many batches of it
    this rank has consumed. The trainer keeps it in this one object, saves it into every
    checkpoint (`state_dict`, the checkpoint's `step`, `epoch` and `sampler_position`) and
    restores it from the one it resumes from."""

    step: int = 0
    epoch: int = 1
    position: int = 0

    def state_dict(self) -> dict[str, int]:
        return {"step": self.step, "epoch": self.epoch, "sampler_position": self.position}

    def load_state_dict(self, checkpoint: Mapping[str, Any], batches_per_epoch: int) -> None:
        """Restore from a checkpoint: at an epoch's end, the next epoch starts."""
        self.step = int(checkpoint["step"])
        self.epoch, self.position = lb.resume_position(checkpoint, batches_per_epoch)


@dataclass
class Trainer:
    """The loop of `fit` and the state it owns (see `fit`)."""

    ctx: DistContext
    model: nn.Module
    optimizer: torch.optim.Optimizer
    train_loader: DataLoader[Any]
    loss_fn: LossFn
    evaluate: EvalFn
    total_steps: int
    log_every_steps: int
    scheduler: Any | None = None
    after_step: StepHook | None = None
    extra: dict[str, Any] | None = None
    state: TrainState = field(default_factory=TrainState)

    def __post_init__(self) -> None:
        self.batches_per_epoch = lb.batches_per_epoch(self.train_loader)
        self.scaler = lb.make_grad_scaler(device=self.ctx.device)
        self.window_loss = torch.zeros((), device=self.ctx.device)
        self.window_steps = 0

    def resume(self) -> None:
        """Load LAUNCHBAY_RESUME_FROM, if set, into the model, optimizer... and the state."""
        checkpoint = lb.load_resume_state()
        if checkpoint is None:
            return
        lb.restore(checkpoint, self.model, self.optimizer, self.scheduler, self.scaler)
        self.state.load_state_dict(checkpoint, self.batches_per_epoch)
        state = self.state
        say(
            self.ctx,
            f"resumed at step {state.step}: epoch {state.epoch}, skipping {state.position} batches",
        )

    def run(self) -> int:
        state, total = self.state, self.total_steps
        if state.step >= total:
            say(self.ctx, f"nothing to do: the checkpoint is at step {state.step} of {total}")
            return state.step
        started, start_step = time.monotonic(), state.step
        last_epoch = math.ceil(total / self.batches_per_epoch)
        while state.epoch <= last_epoch and state.step < total:
            self.run_epoch()
            if state.step < total:
                state.epoch, state.position = state.epoch + 1, 0
        elapsed = time.monotonic() - started
        say(
            self.ctx,
            f"done: {state.step - start_step} steps in {elapsed:.1f}s, final step {state.step}",
        )
        return state.step

    def run_epoch(self) -> None:
        """The rest of the epoch under way (from its position), or up to the last step."""
        state = self.state
        self.model.train()
        batches = lb.start_epoch(self.train_loader, state.epoch, skip_batches=state.position)
        for batch in batches:
            self.train_step(batch)
            end_of_epoch = (
                state.position == self.batches_per_epoch or state.step == self.total_steps
            )
            metrics = self.report(end_of_epoch)
            if lb.checkpoint_due(state.step, state.epoch, end_of_epoch) or (
                state.step == self.total_steps
            ):
                self.save(metrics)
            if state.step == self.total_steps:
                break

    def train_step(self, batch: Any) -> None:
        optimizer, scaler = self.optimizer, self.scaler
        optimizer.zero_grad(set_to_none=True)
        with lb.autocast(self.ctx):
            loss = self.loss_fn(self.model, batch)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if self.scheduler is not None:
            self.scheduler.step()
        self.state.step += 1
        self.state.position += 1
        self.window_loss += loss.detach().float()
        self.window_steps += 1
        if self.after_step is not None:
            self.after_step(self.state.step)

    def report(self, end_of_epoch: bool) -> dict[str, float]:
        """Report the window's loss (and, at an epoch's end, the held-out metrics) when due."""
        state = self.state
        metrics: dict[str, float] = {}
        if state.step % self.log_every_steps != 0 and not end_of_epoch:
            return metrics
        metrics["loss"] = lb.reduce_mean(self.window_loss / self.window_steps).item()
        metrics["lr"] = float(self.optimizer.param_groups[0]["lr"])
        self.window_loss.zero_()
        self.window_steps = 0
        if end_of_epoch:
            with lb.evaluating(state.step):
                metrics.update(self.evaluate())
            self.model.train()
        lb.report(state.step, state.epoch, total_steps=self.total_steps, **metrics)
        shown = " ".join(f"{k}={v:.4g}" for k, v in metrics.items())
        say(self.ctx, f"epoch {state.epoch} step {state.step}/{self.total_steps} {shown}")
        return metrics

    def save(self, metrics: dict[str, float]) -> None:
        path = lb.save_checkpoint(
            self.model,
            self.optimizer,
            self.scheduler,
            self.scaler,
            metrics=metrics,
            extra=self.extra,
            **self.state.state_dict(),
        )
        if path is not None:
            say(self.ctx, f"checkpoint {path.name}")


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
    trainer = Trainer(
        ctx=ctx,
        model=model,
        optimizer=optimizer,
        train_loader=train_loader,
        loss_fn=loss_fn,
        evaluate=evaluate,
        total_steps=total_steps,
        log_every_steps=log_every_steps,
        scheduler=scheduler,
        after_step=after_step,
        extra=extra,
    )
    # One line from every rank, so each rank's log shows it started and where.
    print(
        f"rank {ctx.rank}/{ctx.world_size} on {ctx.device} ({ctx.backend}): "
        f"{trainer.batches_per_epoch} batches per epoch",
        flush=True,
    )
    trainer.resume()
    return trainer.run()


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
