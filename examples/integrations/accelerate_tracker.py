"""Hugging Face accelerate reporting to Launchbay through `LaunchbayTracker`, with a
checkpoint per epoch and resume (the SDK's save_checkpoint / load_resume_state).

On CPU, accelerate runs multi-process only with ACCELERATE_USE_CPU=1, which Launchbay sets for
torchrun jobs on CPU. `--fail-after-epoch N` makes the first attempt fail after epoch N has
been saved: with `max_retries: 1` the next attempt resumes from that checkpoint.

Its spec is `accelerate_tracker.yaml`, beside it, which says how to run it:
`launchbay run -f accelerate_tracker.yaml -- python accelerate_tracker.py`.
"""

import argparse
import os

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from jobs import runtime as lb
from jobs.integrations.accelerate import LaunchbayTracker


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fail-after-epoch", type=int, default=0)
    args = parser.parse_args()

    accelerator = Accelerator(log_with=LaunchbayTracker())
    accelerator.init_trackers("accelerate-tracker", config=vars(args))
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = (x @ torch.linspace(-1, 1, 8) + 0.5).unsqueeze(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    first_epoch, step = 1, 0
    state = lb.load_resume_state()
    if state is not None:  # a retried attempt: go on from the last checkpoint
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first_epoch, step = state["epoch"] + 1, state["step"]
        accelerator.print(f"resumed from epoch {state['epoch']} (step {step})")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(first_epoch, args.epochs + 1):
        for inputs, targets in loader:
            loss = F.mse_loss(model(inputs), targets)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            mean = accelerator.reduce(loss.detach(), reduction="mean").item()
            accelerator.log({"loss": mean, "epoch": epoch - 1 + 0.5}, step=step)
        accelerator.wait_for_everyone()
        lb.save_checkpoint(accelerator.unwrap_model(model), optimizer, step=step, epoch=epoch)
        first_try = os.environ.get("LAUNCHBAY_ATTEMPT", "1") == "1"
        if first_try and epoch == args.fail_after_epoch:
            raise SystemExit(f"failing on purpose after epoch {epoch}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
