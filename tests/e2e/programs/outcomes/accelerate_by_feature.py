"""The shape of accelerate's examples/by_feature/ scripts (checkpointing.py): argparse with
`--cpu`, `--mixed_precision`, `--checkpointing_steps`, `--output_dir`; `training_function(config,
args)` with `Accelerator(cpu=args.cpu, ...)`, `accelerator.prepare`, `accelerator.backward`,
`gather_for_metrics`, `accelerator.print` and `save_state` every epoch, run with its defaults.
accelerate's own RegressionModel and RegressionDataset stand in for BERT on GLUE (no Hub).
Nothing of Launchbay's is imported."""

import argparse
import os

import torch
from accelerate import Accelerator
from accelerate.test_utils.training import RegressionDataset, RegressionModel
from accelerate.utils import set_seed
from torch.utils.data import DataLoader


def get_dataloaders(accelerator: Accelerator, batch_size: int = 16):
    train_dataloader = DataLoader(RegressionDataset(length=96, seed=1), batch_size, shuffle=True)
    eval_dataloader = DataLoader(RegressionDataset(length=32, seed=2), batch_size)
    return train_dataloader, eval_dataloader


def training_function(config, args):
    # Initialize accelerator
    accelerator = Accelerator(cpu=args.cpu, mixed_precision=args.mixed_precision)
    lr = config["lr"]
    num_epochs = int(config["num_epochs"])
    seed = int(config["seed"])
    batch_size = int(config["batch_size"])

    checkpointing_steps = args.checkpointing_steps
    set_seed(seed)
    train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)
    model = RegressionModel()
    optimizer = torch.optim.AdamW(params=model.parameters(), lr=lr)
    model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader
    )
    overall_step = 0
    for epoch in range(num_epochs):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(batch["x"])
            loss = torch.nn.functional.mse_loss(outputs, batch["y"])
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            overall_step += 1

        model.eval()
        squared, count = 0.0, 0
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                predictions = model(batch["x"])
            predictions, references = accelerator.gather_for_metrics((predictions, batch["y"]))
            squared += float(((predictions - references) ** 2).sum())
            count += len(references)
        eval_metric = {"mse": squared / count, "steps": overall_step}
        # Use accelerator.print to print only on the main process.
        accelerator.print(f"epoch {epoch}:", eval_metric)
        if checkpointing_steps == "epoch":
            output_dir = f"epoch_{epoch}"
            if args.output_dir is not None:
                output_dir = os.path.join(args.output_dir, output_dir)
            accelerator.save_state(output_dir)
    accelerator.end_training()


def main():
    parser = argparse.ArgumentParser(description="Simple example of training script.")
    parser.add_argument(
        "--mixed_precision",
        type=str,
        default=None,
        choices=["no", "fp16", "bf16", "fp8"],
        help="Whether to use mixed precision.",
    )
    parser.add_argument("--cpu", action="store_true", help="If passed, will train on the CPU.")
    parser.add_argument(
        "--checkpointing_steps",
        type=str,
        default=None,
        help="Whether the various states should be saved at the end of every n steps, or 'epoch'.",
    )
    parser.add_argument(
        "--output_dir",
        type=str,
        default=".",
        help="Optional save directory where all checkpoint folders will be stored.",
    )
    args = parser.parse_args()
    config = {"lr": 2e-2, "num_epochs": 2, "seed": 42, "batch_size": 16}
    training_function(config, args)


if __name__ == "__main__":
    main()
